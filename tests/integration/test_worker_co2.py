"""A worker prices its energy at its region's forecast intensity, and a forecast it cannot
read costs the CO2 metric, never the heartbeat."""

from __future__ import annotations

import logging

import pytest
from redis.asyncio import Redis

from proto.codec import encode
from proto.messages import Forecast
from services.worker.instant_backend import InstantBackend
from services.worker.service import WorkerShim
from shared.lifecycle import service_context
from shared.servers import ServerProcess, free_port
from tests.factories import connected_settings

pytestmark = pytest.mark.connected


async def test_the_worker_reads_its_regions_forecast_and_survives_a_bad_one(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Test the value for the current model hour, a payload that does not decode, and a
    Redis that cannot be reached: ``None`` for the metric, one warning, heartbeats go on."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("worker", settings) as ctx:
        now = ctx.clock.now()
        start = now - now % 3600.0
        forecast = Forecast(
            region=settings.worker.region,
            issued_at=0.0,
            start_s=start,
            step_s=3600,
            values=[321.0, 123.0],
            p10=[300.0, 100.0],
            p90=[340.0, 140.0],
        )
        key = ctx.keys.forecast(settings.worker.region)
        await ctx.redis.set(key, encode(forecast))
        shim = WorkerShim(ctx, InstantBackend(gpu="A100-80GB", model="llama-3-8b", tp=1))
        assert await shim.co2.intensity_now() == 321.0

        await ctx.redis.set(key, b"\x93not a forecast")
        garbled = WorkerShim(ctx, InstantBackend(gpu="A100-80GB", model="llama-3-8b", tp=1))
        assert await garbled.co2.intensity_now() is None
        await garbled.publish_stats()  # the heartbeat still goes out

        ctx.redis = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
        try:
            unreachable = WorkerShim(ctx, InstantBackend(gpu="A100-80GB", model="llama-3-8b", tp=1))
            with caplog.at_level(logging.WARNING, logger="services.worker.co2"):
                assert await unreachable.co2.intensity_now() is None
                assert await unreachable.co2.intensity_now() is None
        finally:
            await ctx.redis.aclose()
    warnings = [r for r in caplog.records if "cannot read the" in r.message]
    assert len(warnings) == 2  # one for the garbled payload, one for the lost Redis
