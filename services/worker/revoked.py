"""Whether the router took a request back from this worker after the worker accepted it.

The router writes ``revoked:<worker>`` (request id → wall time revoked) before it runs a
silent worker's requests elsewhere (``services/router/revocations.py``). A revocation
counts against this worker's run only if it came at or after this worker accepted the
request: one from an earlier placement of the same request (it came back here since) does
not. The lease guard, the reply outbox and the shell all judge by this one rule.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["revoked_since"]


def revoked_since(revoked: Mapping[str, float], request_id: str, accepted_at: float) -> bool:
    """Whether ``revoked`` (request id → time revoked) takes ``request_id`` back at or after
    ``accepted_at``, when this worker accepted it."""
    return revoked.get(request_id, -1.0) >= accepted_at
