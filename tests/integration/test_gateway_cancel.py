"""An HTTP client that disconnects cancels its request: the stack stops generating for it.

The whole in-process stack at real time (speed-up 1): a 4,000-token request runs for about
50 s, so an ending within seconds of the hang-up can only be the cancel's.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from nats.aio.msg import Msg

from proto.codec import request_endings
from proto.messages import ErrorReply
from proto.subjects import Subjects
from services.gateway.flight import CANCELS_SENT
from shared.bus import connect_nats
from shared.cancels import CANCELLED_CODE
from shared.config import NatsSettings
from shared.servers import ServerProcess
from tests.integration.test_gateway import EXACT, _gateway

pytestmark = pytest.mark.connected

BODY = {"model": "llama-3-8b", "prompt": "x", "max_tokens": 4000, **EXACT}


async def test_a_client_that_disconnects_cancels_its_request_streaming_or_not(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a streaming client hanging up after its first token, and a non-streaming
    one giving up while it waits, each get their request ended with ``cancelled`` on
    ``request.done`` within seconds (the worker stopped it), and the gateway serves on."""
    cancelled: list[ErrorReply] = []

    async def on_done(msg: Msg) -> None:
        cancelled.extend(
            e
            for e in request_endings(msg.data)
            if isinstance(e, ErrorReply) and e.code == CANCELLED_CODE
        )

    sent_before = CANCELS_SENT.labels("client_disconnected")._value.get()
    nc = await connect_nats(NatsSettings(url=nats_server.url), "test-done")
    try:
        await nc.subscribe(Subjects(namespace).request_done_wildcard, cb=on_done)
        await nc.flush()
        async with _gateway(nats_server, redis_server, namespace, speedup=1.0) as gateway:
            url = f"{gateway.url}/v1/completions"
            async with aiohttp.ClientSession() as session:
                response = await session.post(url, json={**BODY, "stream": True})
                assert response.status == 200
                assert (await response.content.readline()).startswith(b"data: ")
                response.close()  # hang up mid-stream
                hung_up = time.monotonic()
                with pytest.raises(TimeoutError):
                    # Gives up while the gateway waits for the whole answer: no write will
                    # fail there, so only the disconnect itself can tell the gateway.
                    await session.post(url, json=BODY, timeout=aiohttp.ClientTimeout(total=2.0))
            for _ in range(300):
                if len(cancelled) >= 2:
                    break
                await asyncio.sleep(0.05)
            elapsed = time.monotonic() - hung_up
            assert len(gateway.state.router) == 0
            async with (
                aiohttp.ClientSession() as session,
                session.post(url, json={**BODY, "max_tokens": 3}) as after,
            ):
                assert after.status == 200
                assert (await after.json())["usage"]["completion_tokens"] == 3
            client_id = gateway.state.client_id
    finally:
        await nc.close()
    assert len(cancelled) == 2, cancelled
    assert elapsed < 20.0  # the requests would have run ~50 s each
    assert all((e.request_id or "").startswith(f"{client_id}.") for e in cancelled)
    assert {e.service for e in cancelled} <= {"worker", "scheduler"}
    assert CANCELS_SENT.labels("client_disconnected")._value.get() == sent_before + 2
