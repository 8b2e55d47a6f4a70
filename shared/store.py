"""Redis client creation (redis-py asyncio)."""

from __future__ import annotations

from redis.asyncio import Redis

from shared.config import RedisSettings

__all__ = ["as_bytes", "connect_redis"]


def connect_redis(settings: RedisSettings) -> Redis:
    """Create a Redis client; connections open lazily and reconnect on their own."""
    return Redis.from_url(
        settings.url,
        socket_timeout=settings.socket_timeout_s,
        socket_connect_timeout=settings.socket_timeout_s,
        health_check_interval=10,
        retry_on_timeout=True,
    )


def as_bytes(value: bytes | str) -> bytes:
    """Redis values as bytes (the client is typed ``bytes | str``; ours never decodes)."""
    return value if isinstance(value, bytes) else value.encode()
