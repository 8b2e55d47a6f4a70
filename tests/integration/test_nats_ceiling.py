"""Overload over NATS is answered within seconds: the scheduler's ceiling (issue 29).

Before, a NATS client offered more than the stack served waited without bound (228 s at
10× capacity) and the queues grew. Here the classifier and the scheduler run on real
servers with no worker, so nothing queued is ever served: requests beyond the pool's
bound are answered ``overloaded`` at their hand-off, and the queued ones once they have
waited ``scheduler.max_queue_wait_s``; each exactly once, the ingress stream emptied.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from nats.aio.subscription import Subscription

from proto.codec import encode
from proto.messages import ErrorReply, Request
from services.classifier.pipeline import ClassifierCore
from services.classifier.service import build_core, consume
from services.planner.service import static_plan
from services.scheduler.ceiling import OVERLOADED_CODE, QUEUE_FULL, QUEUE_WAIT
from services.scheduler.service import SchedulerShell
from shared.bus import ensure_ingress_stream
from shared.config import Settings
from shared.lifecycle import ServiceContext, service_context
from shared.servers import ServerProcess
from tests.factories import error_replies, no_ready, until

pytestmark = pytest.mark.connected

QUEUE_BOUND = 3
WAIT_BOUND_S = 1.0
OFFERED = 8


async def _serving(
    ctx: ServiceContext,
) -> tuple[SchedulerShell, ClassifierCore, list[ErrorReply], Subscription]:
    """The ingress stream, a scheduler, a classifier core on the static plan, and client
    ``c``'s error replies as they arrive."""
    await ensure_ingress_stream(ctx.js, ctx.subjects)
    scheduler = SchedulerShell(ctx, on_ready=no_ready)
    core = build_core(ctx)
    core.update_plan(static_plan(ctx.settings.planner, 0, time.time(), 60.0))
    replies, sub = await error_replies(ctx.nc, ctx.subjects.client_wildcard("c"))
    return scheduler, core, replies, sub


async def _publish(ctx: ServiceContext, rid: str) -> None:
    """One small request of client ``c`` on the ingress stream."""
    request = Request(
        request_id=rid,
        model="llama-3-8b",
        reply_subject=ctx.subjects.client_reply("c", rid),
        sent_at=time.time(),
        max_tokens=8,
        prompt_tokens=16,
    )
    await ctx.js.publish(ctx.subjects.ingress_request, encode(request))


async def test_requests_beyond_the_bound_are_shed_at_once_and_the_queued_after_the_wait(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that of 8 requests on a pool bounded at 3 with no worker, 5 get ``overloaded``
    (``queue_full``) at their hand-off and the 3 queued ones ``overloaded``
    (``queue_wait``) once they waited 1 s: every request answered once, within seconds,
    nothing left in the stream, the queues or Redis."""
    settings = Settings(
        namespace=namespace,
        nats={"url": nats_server.url},
        redis={"url": redis_server.url},
        classifier={"plan_wait_s": 0.0},
        scheduler={
            "max_queued_per_pool": QUEUE_BOUND,
            "max_queue_wait_s": WAIT_BOUND_S,
            "ladder": False,
        },
    )
    async with service_context("classifier", settings) as ctx:
        scheduler, core, replies, sub = await _serving(ctx)
        tasks = [
            asyncio.create_task(consume(ctx, core, scheduler.submit, ctx.tracer)),
            asyncio.create_task(scheduler.run([])),
        ]
        try:
            sent_at = time.monotonic()
            for i in range(OFFERED):
                await _publish(ctx, f"r{i}")
            await until(lambda: len(replies) >= OFFERED - QUEUE_BOUND, timeout_s=5.0)
            assert sum(scheduler.state.backlog().values()) == QUEUE_BOUND
            await until(lambda: len(replies) >= OFFERED, timeout_s=5.0)
            answered_within_s = time.monotonic() - sent_at
            await asyncio.sleep(0.3)  # a second answer to any of them would come by now
            info = await ctx.js.stream_info(ctx.subjects.ingress_stream)
            await scheduler.forget_ended()
            left_in_redis = await ctx.redis.hlen(ctx.keys.queued)
        finally:
            ctx.stop.set()
            for task in tasks:
                await asyncio.wait_for(task, 10.0)
            await sub.unsubscribe()
    assert {r.code for r in replies} == {OVERLOADED_CODE}
    assert Counter(r.reason.split(":", 1)[0] for r in replies) == {
        QUEUE_FULL: OFFERED - QUEUE_BOUND,
        QUEUE_WAIT: QUEUE_BOUND,
    }
    assert len({r.request_id for r in replies}) == OFFERED == len(replies)
    assert answered_within_s < WAIT_BOUND_S + 3.0
    assert info.state.messages == 0
    assert scheduler.state.backlog() == {}
    assert left_in_redis == 0


async def test_a_request_first_delivered_past_the_ingress_wait_bound_is_shed_not_served(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a request left in the ingress stream longer than
    ``classifier.max_ingress_wait_s`` (no classifier took it) is answered ``overloaded``
    (``ingress_wait``) when it is first delivered, settled, and never reaches the
    scheduler, while one published just before the classifier starts is queued."""
    settings = Settings(
        namespace=namespace,
        nats={"url": nats_server.url},
        redis={"url": redis_server.url},
        classifier={"plan_wait_s": 0.0, "max_ingress_wait_s": 1.0},
    )
    async with service_context("classifier", settings) as ctx:
        scheduler, core, replies, sub = await _serving(ctx)

        await _publish(ctx, "stale")
        await asyncio.sleep(1.5)  # past the bound, nobody consuming
        await _publish(ctx, "fresh")
        consuming = asyncio.create_task(consume(ctx, core, scheduler.submit, ctx.tracer))
        try:
            await until(lambda: len(replies) == 1, timeout_s=10.0)
            await until(lambda: scheduler.state.backlog() == {"main": 1}, timeout_s=10.0)
            info = await ctx.js.stream_info(ctx.subjects.ingress_stream)
        finally:
            ctx.stop.set()
            await asyncio.wait_for(consuming, 10.0)
            await sub.unsubscribe()
    (shed,) = replies
    assert (shed.request_id, shed.code) == ("stale", OVERLOADED_CODE)
    assert shed.reason.startswith("ingress_wait:")
    assert info.state.messages == 0
