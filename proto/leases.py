"""The lease of a dispatch: until when (wall time) its worker may start it.

A dispatch (``worker.<id>.dispatch`` and ``…dispatch_batch``) carries its lease in a NATS
header rather than in the message, so the message types are unchanged and a worker that
knows no leases simply runs every dispatch, as before. The router sets the expiry to its
send time plus ``router.lease_s``; a worker that reads the dispatch later (it was frozen
past it, and the router may have placed the request elsewhere by then) refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from proto.codec import DecodeError

__all__ = ["LEASE_HEADER", "lease_expiry", "lease_headers"]

LEASE_HEADER: Final = "Gs-Lease-Expires-At"
"""Header of a dispatch: the lease's expiry, wall-clock seconds since the epoch (decimal)."""


def lease_headers(expires_at: float) -> dict[str, str]:
    """The headers of a dispatch whose lease ends at ``expires_at`` (wall seconds)."""
    return {LEASE_HEADER: f"{expires_at:.6f}"}


def lease_expiry(headers: Mapping[str, str] | None) -> float | None:
    """The lease expiry a dispatch's headers carry; None for a dispatch without a lease.

    Raises:
        DecodeError: the header is there but not a finite number of seconds.
    """
    if not headers or LEASE_HEADER not in headers:
        return None
    raw = headers[LEASE_HEADER]
    try:
        value = float(raw)
    except ValueError:
        raise DecodeError(f"{LEASE_HEADER} is not a number: {raw[:40]!r}") from None
    if not math.isfinite(value) or value <= 0.0:
        raise DecodeError(f"{LEASE_HEADER} is not a positive time: {raw[:40]!r}")
    return value
