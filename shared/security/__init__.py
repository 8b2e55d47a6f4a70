"""Per-service identities, NATS subject permissions, Redis ACLs, secrets and TLS.

Submodules are pure generators (``nats_acl``, ``redis_acl``) and small helpers
(``identities``, ``secrets``, ``tls``); ``greenserve up --secure`` and the compose stack's
secure variant put them together. See ``docs/security.md``.
"""

from __future__ import annotations

__all__: list[str] = []
