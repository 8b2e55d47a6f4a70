"""One hung worker does not delay the dvfs agent's clock commands to the others.

The agent sent its clock commands one after another, each waiting for the reply up to the
request timeout: a worker alive by its heartbeat but not answering held every worker after
it back by that timeout, each control period.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import pytest
from nats.aio.msg import Msg

from proto.codec import decode, encode
from proto.messages import ClockCommand, ClockReply
from proto.subjects import Subjects
from services.dvfs.service import serve
from shared.config import Settings
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests.factories import worker_stats

pytestmark = pytest.mark.connected

TIMEOUT_S = 2.0


async def test_the_others_are_answered_well_before_a_hung_workers_timeout(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Test that with a silent worker first, the others get and answer their commands at
    once, and the silent one's timeout is still logged."""
    subjects = Subjects(namespace)
    settings = Settings(
        namespace=namespace,
        nats={"url": nats_server.url, "request_timeout_s": TIMEOUT_S},
        redis={"url": redis_server.url},
        dvfs={"node_id": "n", "mode": "fixed", "clock_mhz": 1005.0, "period_s": 0.1},
        worker={"heartbeat_ttl_s": 30.0},
    )
    received: dict[str, float] = {}
    answered: dict[str, float] = {}

    def worker(worker_id: str, *, answers: bool) -> Callable[[Msg], Awaitable[None]]:
        async def on_clock(msg: Msg) -> None:
            cmd = decode(msg.data, ClockCommand)
            received.setdefault(worker_id, time.monotonic())
            if answers:
                reply = ClockReply(worker_id=worker_id, applied_mhz=cmd.clock_mhz, accepted=True)
                await msg.respond(encode(reply))
                answered.setdefault(worker_id, time.monotonic())

        return on_clock

    caplog.set_level(logging.WARNING, logger="services.dvfs.service")
    async with service_context("dvfs", settings) as ctx:
        # the hung one first: the agent commands workers in the order it heard them
        for worker_id, answers in (("hung", False), ("w1", True), ("w2", True)):
            await ctx.nc.subscribe(
                subjects.worker_clock_v2("n", worker_id), cb=worker(worker_id, answers=answers)
            )
        agent = asyncio.create_task(serve(ctx))
        try:
            await asyncio.sleep(0.3)  # subscribed
            for worker_id in ("hung", "w1", "w2"):
                stats = worker_stats(worker_id, node_id="n", clock_mhz=1410.0, at=time.time())
                await ctx.nc.publish(subjects.worker_stats("p", "n", worker_id), encode(stats))
            deadline = time.monotonic() + 5.0
            while len(answered) < 2 or "hung" not in received:
                assert time.monotonic() < deadline, f"commands received: {received}"
                await asyncio.sleep(0.02)
            await asyncio.sleep(TIMEOUT_S + 0.5)  # the hung worker's request times out
        finally:
            ctx.stop.set()
            await asyncio.wait_for(agent, 5.0)
    hung_at = received["hung"]
    assert all(answered[w] - hung_at < TIMEOUT_S / 4 for w in ("w1", "w2")), (received, answered)
    assert any("clock command to hung failed" in r.getMessage() for r in caplog.records)
