"""Redis client creation (redis-py asyncio)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.sentinel import Sentinel
from redis.connection import parse_url

from shared.config import RedisSettings
from shared.security.secrets import read_secret

__all__ = ["as_bytes", "connect_redis", "sentinel_addresses"]


def connect_redis(settings: RedisSettings) -> Redis:
    """Create a Redis client; connections open lazily and reconnect on their own.

    An ACL user and password from the settings (or its password file) override none in the
    URL; a CA file is for ``rediss://`` URLs with a self-signed server certificate. With
    ``sentinels`` each new connection goes to the primary the Sentinels name, so after a
    failover the client's next command (a connection to the old primary fails, or a write
    it answers ``READONLY`` as a replica) lands on the promoted one.
    """
    auth: dict[str, Any] = {}
    if settings.username:
        auth["username"] = settings.username
    password = read_secret(settings.password, settings.password_file, "redis")
    if password is not None:
        auth["password"] = password
    if settings.tls_ca_file is not None:
        auth["ssl_ca_certs"] = str(settings.tls_ca_file)
    if settings.sentinels:
        return _primary_of_sentinels(settings, auth)
    return Redis.from_url(
        settings.url,
        socket_timeout=settings.socket_timeout_s,
        socket_connect_timeout=settings.socket_timeout_s,
        health_check_interval=10,
        retry_on_timeout=True,
        **auth,
    )


def sentinel_addresses(items: tuple[str, ...] | list[str]) -> list[tuple[str, int]]:
    """``host:port`` items (validated by the settings) as (host, port) pairs."""
    pairs = []
    for item in items:
        host, _, port = item.rpartition(":")
        pairs.append((host, int(port)))
    return pairs


def _primary_of_sentinels(settings: RedisSettings, auth: dict[str, Any]) -> Redis:
    # The URL still says which database, user and password; its host is the Sentinels'.
    parsed: dict[str, Any] = parse_url(settings.url)  # type: ignore[no-untyped-call]
    from_url = {k: v for k, v in parsed.items() if k in ("db", "username", "password")}
    timeouts = {
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.socket_timeout_s,
    }
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        sentinel_addresses(settings.sentinels), sentinel_kwargs=timeouts, **timeouts
    )
    client: Redis = sentinel.master_for(
        settings.master_name,
        health_check_interval=10,
        retry_on_timeout=True,
        **{**from_url, **auth},
    )
    return client


def as_bytes(value: bytes | str) -> bytes:
    """Redis values as bytes (the client is typed ``bytes | str``; ours never decodes)."""
    return value if isinstance(value, bytes) else value.encode()
