"""The worker's record of ended requests on a real Redis: written at once, bounded, and kept
through a Redis outage."""

from __future__ import annotations

import asyncio
import time

import pytest

from proto.keys import Keys
from services.worker.ended_log import EndedLog
from shared.config import RedisSettings
from shared.servers import ServerProcess, start_redis
from shared.store import connect_redis

pytestmark = pytest.mark.connected


async def test_endings_reach_redis_at_once_with_an_expiry(
    redis_server: ServerProcess, namespace: str
) -> None:
    """Test that added ids are in the worker's set right after the writer wakes."""
    redis = connect_redis(RedisSettings(url=redis_server.url))
    key = Keys(namespace).ended("w1")
    log = EndedLog(redis, key, retention_s=120.0, service="worker")
    stop = asyncio.Event()
    writer = asyncio.create_task(log.run(stop))
    try:
        log.add(["a", "b"])
        for _ in range(100):
            await asyncio.sleep(0.01)
            if await redis.zscore(key, "b") is not None:
                break
        assert await redis.zscore(key, "a") == pytest.approx(time.time(), abs=5.0)
        assert await redis.zscore(key, "never") is None
        assert 0 < await redis.ttl(key) <= 120
    finally:
        stop.set()
        await writer
        await redis.aclose()


async def test_old_endings_are_trimmed(redis_server: ServerProcess, namespace: str) -> None:
    """Test that entries older than the retention go at the next trim."""
    redis = connect_redis(RedisSettings(url=redis_server.url))
    key = Keys(namespace).ended("w1")
    await redis.zadd(key, {"old": time.time() - 100.0})
    log = EndedLog(redis, key, retention_s=10.0, service="worker")
    try:
        log.add(["new"])
        assert await log.flush()
        assert await redis.zscore(key, "old") is None
        assert await redis.zscore(key, "new") is not None
    finally:
        await redis.aclose()


async def test_endings_wait_for_redis_and_are_written_when_it_is_back(
    tmp_path_factory: pytest.TempPathFactory, namespace: str
) -> None:
    """Test that a failed write keeps the ids and the next one writes them."""
    server = start_redis(tmp_path_factory.mktemp("redis-outage"))
    redis = connect_redis(RedisSettings(url=server.url))
    key = Keys(namespace).ended("w1")
    log = EndedLog(redis, key, retention_s=60.0, service="worker")
    try:
        server.kill()
        log.add(["during"])
        assert not await log.flush()
        server = start_redis(server.workdir, server.port)
        for _ in range(50):
            if await log.flush():
                break
            await asyncio.sleep(0.1)
        assert await redis.zscore(key, "during") is not None
    finally:
        await redis.aclose()
        server.stop()
