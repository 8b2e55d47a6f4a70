"""Redis client creation (redis-py asyncio)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from shared.config import RedisSettings
from shared.security.secrets import read_secret

__all__ = ["as_bytes", "connect_redis"]


def connect_redis(settings: RedisSettings) -> Redis:
    """Create a Redis client; connections open lazily and reconnect on their own.

    An ACL user and password from the settings (or its password file) override none in the
    URL; a CA file is for ``rediss://`` URLs with a self-signed server certificate.
    """
    auth: dict[str, Any] = {}
    if settings.username:
        auth["username"] = settings.username
    password = read_secret(settings.password, settings.password_file, "redis")
    if password is not None:
        auth["password"] = password
    if settings.tls_ca_file is not None:
        auth["ssl_ca_certs"] = str(settings.tls_ca_file)
    return Redis.from_url(
        settings.url,
        socket_timeout=settings.socket_timeout_s,
        socket_connect_timeout=settings.socket_timeout_s,
        health_check_interval=10,
        retry_on_timeout=True,
        **auth,
    )


def as_bytes(value: bytes | str) -> bytes:
    """Redis values as bytes (the client is typed ``bytes | str``; ours never decodes)."""
    return value if isinstance(value, bytes) else value.encode()
