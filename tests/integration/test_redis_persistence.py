"""The local redis-server keeps what it held across a restart (append-only file).

``greenserve up`` and the fault bench start Redis through :func:`shared.servers.start_redis`;
it ran with ``--save "" --appendonly no``, so a Redis restarted during a run came back
empty and every request only Redis knew of (queued, placed) was lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from shared.servers import start_redis

pytestmark = pytest.mark.connected


async def test_a_restarted_local_redis_comes_back_with_its_data(tmp_path: Path) -> None:
    """Test that the local Redis logs writes to an fsync-every-second append-only file and
    that one stopped and started again on the same folder and port still holds them."""
    first = start_redis(tmp_path)
    try:
        client = Redis.from_url(first.url, decode_responses=True)
        try:
            assert await client.config_get("appendonly") == {"appendonly": "yes"}
            assert await client.config_get("appendfsync") == {"appendfsync": "everysec"}
            await client.hset("gs:queued", "c.r1", "request")
        finally:
            await client.aclose()
    finally:
        first.stop()
    again = start_redis(tmp_path, first.port)
    try:
        client = Redis.from_url(again.url, decode_responses=True)
        try:
            assert await client.hget("gs:queued", "c.r1") == "request"
        finally:
            await client.aclose()
    finally:
        again.stop()
