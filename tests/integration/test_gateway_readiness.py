"""The gateway's liveness and readiness: /readyz fails, with reasons, while requests cannot flow."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proto.keys import Keys
from proto.subjects import Subjects
from services.gateway.health import ReadinessConfig, ReadinessProbe
from services.gateway.service import open_gateway
from services.gateway.state import NAME
from shared.bus import connect_nats, ensure_ingress_stream
from shared.config import GatewaySettings, NatsSettings, RedisSettings, Settings
from shared.counters import ERRORS
from shared.servers import ServerProcess, start_nats, start_redis
from shared.store import connect_redis
from tests.vllm_replay import fixture

pytestmark = pytest.mark.connected


async def _get(http: aiohttp.ClientSession, path: str) -> tuple[int, dict[str, Any]]:
    async with http.get(path) as response:
        return response.status, await response.json()


async def _until_status(
    http: aiohttp.ClientSession, status: int, timeout_s: float = 15.0
) -> dict[str, Any]:
    """Probe /readyz until it answers ``status``; its body then."""
    deadline = time.monotonic() + timeout_s
    while True:
        got, body = await _get(http, "/readyz")
        if got == status:
            return body
        assert time.monotonic() < deadline, f"/readyz stayed {got}: {body}"
        await asyncio.sleep(0.2)


async def test_readiness_follows_workers_redis_and_nats_while_liveness_stays_up(
    tmp_path: Path, namespace: str
) -> None:
    """Test that /readyz is 503 with a reason while no worker is registered, while Redis is
    down and while NATS is down, 200 once all are back, and /healthz is 200 throughout."""
    nats_server = start_nats(tmp_path / "nats")
    redis_server = start_redis(tmp_path / "redis")
    servers: list[ServerProcess] = [nats_server, redis_server]
    settings = Settings(
        namespace=namespace,
        nats=NatsSettings(url=nats_server.url, reconnect_wait_s=0.1),
        redis=RedisSettings(url=redis_server.url, socket_timeout_s=0.5),
    )
    keys = Keys(namespace)
    redis = connect_redis(settings.redis)
    try:
        async with (
            open_gateway(settings, GatewaySettings(port=0)) as gateway,
            aiohttp.ClientSession(gateway.url) as http,
        ):
            body = await _until_status(http, 503)
            assert body["reasons"] == ["no live worker registered"]
            assert (await _get(http, "/healthz"))[0] == 200

            await redis.set(keys.worker("w0"), b"registered", ex=60)
            assert (await _until_status(http, 200))["status"] == "ready"

            redis_server.kill()
            body = await _until_status(http, 503)
            assert body["reasons"][0].startswith("redis unreachable"), body
            assert (await _get(http, "/healthz"))[0] == 200
            redis_server = start_redis(redis_server.workdir, redis_server.port)
            servers[1] = redis_server
            await redis.set(keys.worker("w0"), b"registered", ex=60)
            await _until_status(http, 200)

            nats_server.kill()
            body = await _until_status(http, 503)
            assert "nats disconnected" in body["reasons"], body
            assert (await _get(http, "/healthz"))[0] == 200
            nats_server = start_nats(nats_server.workdir, nats_server.port)
            servers[0] = nats_server
            await _until_status(http, 200)
    finally:
        await redis.aclose()
        for server in servers:
            server.stop()


async def test_health_answers_as_vllm_does(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that /health follows readiness in vLLM's form, status and empty body as the
    recorded vLLM release answers (tests/fixtures/vllm): 503 while no worker is registered,
    200 once one is, each a not-ready answer counted."""
    recorded = json.loads(fixture("health.json"))
    settings = Settings(
        namespace=namespace,
        nats=NatsSettings(url=nats_server.url),
        redis=RedisSettings(url=redis_server.url),
    )
    keys = Keys(namespace)
    redis = connect_redis(settings.redis)
    try:
        async with (
            open_gateway(settings, GatewaySettings(port=0)) as gateway,
            aiohttp.ClientSession(gateway.url) as http,
        ):
            before = _not_ready_count()
            async with http.get("/health") as response:
                unready = (response.status, await response.text())
            assert unready == (recorded["engine_dead"]["status"], recorded["engine_dead"]["body"])
            assert _not_ready_count() == before + 1

            await redis.set(keys.worker("w0"), b"registered", ex=60)
            deadline = time.monotonic() + 15.0
            while True:
                async with http.get("/health") as response:
                    ready = (response.status, await response.text())
                if ready[0] == 200 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert ready == (recorded["ready"]["status"], recorded["ready"]["body"])
    finally:
        await redis.delete(keys.worker("w0"))
        await redis.aclose()


def _not_ready_count() -> float:
    return float(ERRORS.labels(NAME, "not_ready")._value.get())


async def test_a_missing_ingress_stream_is_a_reason_and_verdicts_are_cached(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that readiness names a missing ingress stream, and that within ``cache_s`` a
    probe gets the cached verdict without asking the servers again."""
    subjects, keys = Subjects(namespace), Keys(namespace)
    nc = await connect_nats(NatsSettings(url=nats_server.url), "readiness-test")
    redis = connect_redis(RedisSettings(url=redis_server.url))
    try:
        await redis.set(keys.worker("w0"), b"registered", ex=60)
        fresh = ReadinessProbe(nc, nc.jetstream(), subjects, redis, keys, ReadinessConfig(0.0))
        verdict = await fresh.check()
        assert verdict.reasons == (f"ingress stream {subjects.ingress_stream} missing",)

        await ensure_ingress_stream(nc.jetstream(), subjects)
        cached = ReadinessProbe(nc, nc.jetstream(), subjects, redis, keys, ReadinessConfig(60.0))
        first = await cached.check()
        assert first.ready
        await redis.delete(keys.worker("w0"))
        assert await cached.check() is first  # not asked again within the minute
        assert (await fresh.check()).reasons == ("no live worker registered",)
    finally:
        await redis.delete(keys.worker("w0"))
        await redis.aclose()
        await nc.close()
