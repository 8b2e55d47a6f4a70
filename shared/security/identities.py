"""Who is who on the bus and in the store: one identity per service process.

Every service process (and every client tool) authenticates to NATS and Redis with its own
user name. The *role* decides which subjects and keys it may touch (``nats_acl``,
``redis_acl``); the *scope* narrows a role to one worker, node or client, so ``worker-0``
cannot answer dispatches meant for ``worker-1`` nor write another worker's heartbeat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from proto.subjects import valid_token

__all__ = [
    "BOUND_BY_USER",
    "COMPOSITE_ROLES",
    "ROLES",
    "SCOPED_ROLES",
    "Identity",
    "env_var_name",
]

ROLES: Final = (
    "classifier",
    "scheduler",
    "router",
    "requestpath",
    "worker",
    "dvfs",
    "planner",
    "forecaster",
    "gateway",
    "loadgen",
    "client",
    "monitor",
    "admin",
)
"""Every role: the seven services, the co-located request path, the HTTP gateway, and the
tools that talk to a stack.

``loadgen`` is the trace replayer (it watches worker stats and its own client subjects);
``client`` is an ordinary client bound to one client id; ``monitor`` reads the
store for ``greenserve status``; ``admin`` is the operator's unrestricted account.
"""

COMPOSITE_ROLES: Final = {"requestpath": ("classifier", "scheduler", "router")}
"""Roles of processes that run several services in one (``greenserve.local.requestpath``); their
rules are derived from their parts' (``nats_acl.permissions_for``, ``redis_acl.acl_rules``)."""

SCOPED_ROLES: Final = {"worker": "worker id", "dvfs": "node id", "client": "client id"}
"""Roles whose permissions name one instance; their identity must carry that id."""

BOUND_BY_USER: Final = ("gateway", "loadgen")
"""Client roles whose client id is their user name (``client`` is bound to its scope)."""

_NON_ENV = re.compile(r"[^A-Z0-9]")


@dataclass(frozen=True, slots=True)
class Identity:
    """One NATS/Redis user.

    Attributes:
        user: the user name (a subject token, so it can also name the user's inbox).
        role: one of :data:`ROLES`.
        scope: worker id (role ``worker``), node id (``dvfs``) or client id (``client``).
        node: a worker's node id, which binds its clock subject to that node (optional;
            without it the worker may read its own id's clock subject on any node).
    """

    user: str
    role: str
    scope: str | None = None
    node: str | None = None

    def __post_init__(self) -> None:
        if not valid_token(self.user):
            raise ValueError(f"user {self.user!r} must be a subject token ([A-Za-z0-9_-])")
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; one of {ROLES}")
        if self.role in SCOPED_ROLES:
            if self.scope is None or not valid_token(self.scope):
                raise ValueError(f"role {self.role!r} needs its {SCOPED_ROLES[self.role]}")
        elif self.scope is not None:
            raise ValueError(f"role {self.role!r} takes no scope")
        if self.node is not None and (self.role != "worker" or not valid_token(self.node)):
            raise ValueError("only a worker identity takes a node, and it must be a subject token")

    @property
    def client_id(self) -> str | None:
        """The one client id this identity may send requests as and read replies of.

        A ``client`` is bound to its scope; the gateway and the replayer to their user name
        (what their connection authenticates as, so they need no extra setting); the
        services are not clients (``None``).
        """
        if self.role == "client":
            return self.scope
        return self.user if self.role in BOUND_BY_USER else None

    @property
    def inbox_prefix(self) -> str:
        """Prefix of this user's reply inboxes; only this user may subscribe below it."""
        return f"_INBOX.{self.user}"


def env_var_name(prefix: str, user: str) -> str:
    """Environment variable carrying one user's secret, e.g. ``GS_NATS_PASSWORD_WORKER_0``."""
    return f"{prefix}{_NON_ENV.sub('_', user.upper())}"
