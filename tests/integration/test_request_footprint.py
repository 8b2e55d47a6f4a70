"""Every completion tells its client the GPU energy and CO2 it cost (usage extension fields,
response headers, the final usage chunk of a stream), and the gateway's metrics count the
same figures."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest

from proto.keys import Keys
from services.gateway.footprint import REQUEST_CO2_G, REQUEST_ENERGY_J
from services.gateway.openai_schema import CO2_HEADER, ENERGY_HEADER
from shared.config import RedisSettings
from shared.servers import ServerProcess
from shared.store import connect_redis
from tests.integration.test_gateway import EXACT, _gateway

pytestmark = pytest.mark.connected


async def _forecast_published(redis_url: str, namespace: str, timeout_s: float = 120.0) -> None:
    """Wait for the forecaster's first PJM forecast (the worker prices CO2 with it)."""
    redis = connect_redis(RedisSettings(url=redis_url))
    key = Keys(namespace).forecast("PJM")
    deadline = time.monotonic() + timeout_s
    try:
        while await redis.get(key) is None:
            assert time.monotonic() < deadline, "no PJM forecast was published"
            await asyncio.sleep(0.2)
    finally:
        await redis.aclose()


async def test_the_openai_client_reads_energy_and_co2_of_a_completion_and_a_streamed_chat(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a plain completion carries ``usage.gpu_energy_joules`` and ``co2_grams`` and
    the same figures as headers, that a streamed chat with ``include_usage`` carries them in
    its final chunk, and that the gateway's per-request metrics moved by the same amounts."""
    energy_sum = REQUEST_ENERGY_J._sum.get()
    co2_before = REQUEST_CO2_G._value.get()
    async with _gateway(nats_server, redis_server, namespace) as gateway:
        await _forecast_published(redis_server.url, namespace)
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        try:
            for _ in range(100):  # the worker's heartbeat reads the forecast within a period
                raw = await client.completions.with_raw_response.create(
                    model="llama-3-8b", prompt="Say hi", max_tokens=7, extra_body=EXACT
                )
                if CO2_HEADER in raw.headers:
                    break
                await asyncio.sleep(0.2)
            plain = raw.parse()
            stream = await client.chat.completions.create(
                model="llama-3-8b",
                messages=[{"role": "user", "content": "Say hi"}],
                max_completion_tokens=9,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=EXACT,
            )
            chunks = [chunk async for chunk in stream]
        finally:
            await client.close()
    assert plain.usage is not None
    extra = plain.usage.model_extra or {}
    assert extra["gpu_energy_joules"] > 0
    assert extra["co2_grams"] > 0
    assert float(raw.headers[ENERGY_HEADER]) == pytest.approx(extra["gpu_energy_joules"])
    assert float(raw.headers[CO2_HEADER]) == pytest.approx(extra["co2_grams"], rel=1e-6)
    final = chunks[-1].usage
    assert final is not None
    assert final.completion_tokens == 9
    streamed = final.model_extra or {}
    assert streamed["gpu_energy_joules"] > 0
    assert streamed["co2_grams"] > 0
    # More tokens, more energy: the chat produced 9 tokens of the same prompt, the completion 7.
    assert streamed["gpu_energy_joules"] > 0.5 * extra["gpu_energy_joules"]
    assert REQUEST_ENERGY_J._sum.get() - energy_sum >= (
        extra["gpu_energy_joules"] + streamed["gpu_energy_joules"] - 1e-6
    )
    assert REQUEST_CO2_G._value.get() - co2_before >= (
        extra["co2_grams"] + streamed["co2_grams"] - 1e-9
    )
