"""The client id a connection may use: its NATS user's, or a random one on an open stack.

On a secured stack the server lets a client identity publish only
``ingress.client.<client id>`` and read only ``client.<client id>.>``
(``shared.security.nats_acl``), where the gateway's and the replayer's client id is their
user name (:attr:`~shared.security.identities.Identity.client_id`). Taking the id from the
authenticated connection means those tools need no setting that could disagree with it.
"""

from __future__ import annotations

import uuid

from nats.aio.client import Client

from proto.subjects import valid_token

__all__ = ["connection_client_id", "instance_token", "pick_client_id"]


def connection_client_id(nc: Client) -> str | None:
    """The user ``nc`` authenticated as (``user=`` option or the URL's), if a valid id."""
    user = nc.options.get("user")
    if not user:
        url = nc.connected_url
        user = url.username if url is not None else None
    return user if isinstance(user, str) and valid_token(user) else None


def pick_client_id(nc: Client, explicit: str | None, fallback_prefix: str) -> str:
    """``explicit``, else the connection's user, else ``<fallback_prefix>-<random>``.

    Raises:
        ValueError: ``explicit`` is not a valid id (a subject token).
    """
    if explicit is not None:
        if not valid_token(explicit):
            raise ValueError(f"client id {explicit!r} must be a subject token ([A-Za-z0-9_-])")
        return explicit
    return connection_client_id(nc) or f"{fallback_prefix}-{uuid.uuid4().hex[:12]}"


def instance_token() -> str:
    """A random token that keeps request ids of processes sharing one client id apart."""
    return uuid.uuid4().hex[:8]
