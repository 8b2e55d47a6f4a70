"""Hand-offs to the scheduler that fail, for any length of time, lose no request.

Before: a failed hand-off was nak'ed with a 0.5 s wait and the consumer delivered a message
20 times at most, so Redis refusing writes for about ten seconds left requests in the
stream, never delivered again and never answered; and a store that ran although its call
raised (a Redis timeout after the write) made the redelivery a "duplicate", acked and
never queued. The classifier and the scheduler run here on real servers, the scheduler's
Redis a server of its own that refuses writes the way a Redis in trouble does
(``min-replicas-to-write``: ``NOREPLICAS``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions

from proto.codec import encode
from proto.messages import ClassifiedRequest, Request, SubmitBatchReply
from proto.subjects import Subjects
from services.classifier.handoff import UNAVAILABLE
from services.classifier.service import build_core, consume
from services.planner.service import static_plan
from services.scheduler.service import SchedulerShell
from shared.bus import connect_nats, ensure_ingress_stream
from shared.config import NatsSettings, Settings
from shared.lifecycle import ServiceContext, service_context
from shared.servers import ServerProcess, start_redis
from tests.factories import (
    classified_request,
    connected_settings,
    error_replies,
    no_ready,
    until,
)

pytestmark = pytest.mark.connected

FAST_RETRIES: dict[str, Any] = {
    "handoff_retry_first_s": 0.02,
    "handoff_retry_max_s": 0.08,
    "plan_wait_s": 0.0,
}
"""Short waits, so twenty-odd failed deliveries take a second or two."""
OLD_MAX_DELIVER = 20
"""Deliveries after which the consumer used to give a message up, unanswered."""


def _request(subjects: Subjects, rid: str) -> Request:
    return Request(
        request_id=rid,
        model="llama-3-8b",
        reply_subject=subjects.client_reply("c", rid),
        sent_at=time.time(),
        max_tokens=8,
        prompt_tokens=16,
    )


@asynccontextmanager
async def _classifying(
    ctx: ServiceContext, submit: Callable[[list[ClassifiedRequest]], Awaitable[SubmitBatchReply]]
) -> AsyncIterator[None]:
    """The classifier's consume loop on ``ctx``, handing off by ``submit``, until the end."""
    core = build_core(ctx)
    core.update_plan(static_plan(ctx.settings.planner, 0, time.time(), 60.0))
    consuming = asyncio.create_task(consume(ctx, core, submit, ctx.tracer))
    try:
        yield
    finally:
        ctx.stop.set()
        await asyncio.wait_for(consuming, 10.0)


async def _stream_empty(ctx: ServiceContext) -> bool:
    info = await ctx.js.stream_info(ctx.subjects.ingress_stream)
    return info.state.messages == 0


def _settings(namespace: str, nats_url: str, redis_url: str, **classifier: float) -> Settings:
    """A classifier's settings on the test's servers, with short hand-off retries."""
    return Settings(
        namespace=namespace,
        nats={"url": nats_url},
        redis={"url": redis_url},
        classifier={**FAST_RETRIES, **classifier},
    )


async def test_a_handoff_failing_past_the_old_delivery_limit_is_queued_once_redis_writes(
    nats_server: ServerProcess, namespace: str, tmp_path: Path
) -> None:
    """Test that a request whose hand-off fails more than twenty times (Redis refusing
    writes) is delivered again until Redis takes writes, then queued once and acked."""
    store = start_redis(tmp_path / "redis")
    try:
        settings = _settings(namespace, nats_server.url, store.url)
        async with service_context("classifier", settings) as ctx:
            await ensure_ingress_stream(ctx.js, ctx.subjects)
            scheduler = SchedulerShell(ctx, on_ready=no_ready)
            attempts: list[str] = []

            async def submit(requests: list[ClassifiedRequest]) -> SubmitBatchReply:
                attempts.extend(r.request.request_id for r in requests)
                return await scheduler.submit(requests)

            await ctx.redis.config_set("min-replicas-to-write", 1)  # the outage begins
            await ctx.js.publish(ctx.subjects.ingress_request, encode(_request(ctx.subjects, "r1")))
            async with _classifying(ctx, submit):
                await until(lambda: len(attempts) > OLD_MAX_DELIVER + 2, timeout_s=20.0)
                assert scheduler.state.backlog() == {}
                await ctx.redis.config_set("min-replicas-to-write", 0)  # Redis is back
                await until(lambda: scheduler.state.backlog() == {"main": 1}, timeout_s=10.0)
                deadline = time.monotonic() + 5.0
                while not await _stream_empty(ctx):
                    assert time.monotonic() < deadline, "the message was never acked"
                    await asyncio.sleep(0.05)
            (taken,), _ = await scheduler.pull("main", 8)
            assert taken.request.request_id == "r1"
            assert await ctx.redis.hexists(ctx.keys.dispatched, "r1")  # pulled: recorded once
    finally:
        store.stop()


async def test_a_redelivery_of_a_request_stored_by_a_handoff_that_timed_out_is_queued(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that when the store ran but its call timed out (the reply was lost), the
    redelivered request is queued in the scheduler's memory and acked, not acked as a
    duplicate and left in Redis ``queued`` unserved; and that it is queued once."""
    settings = _settings(namespace, nats_server.url, redis_server.url)
    async with service_context("classifier", settings) as ctx:
        await ensure_ingress_stream(ctx.js, ctx.subjects)
        scheduler = SchedulerShell(ctx, on_ready=no_ready)
        real_eval = ctx.redis.eval
        calls: list[int] = []

        async def eval_then_time_out(*args: Any) -> Any:
            result = await real_eval(*args)
            calls.append(len(calls))
            if len(calls) == 1:  # written, but the reply never came
                raise redis.exceptions.TimeoutError("Timeout reading from socket")
            return result

        monkeypatch.setattr(ctx.redis, "eval", eval_then_time_out)
        replies: list[SubmitBatchReply] = []

        async def submit(requests: list[ClassifiedRequest]) -> SubmitBatchReply:
            replies.append(await scheduler.submit(requests))
            return replies[-1]

        await ctx.js.publish(ctx.subjects.ingress_request, encode(_request(ctx.subjects, "r2")))
        async with _classifying(ctx, submit):
            await until(lambda: bool(replies), timeout_s=10.0)
            deadline = time.monotonic() + 5.0
            while not await _stream_empty(ctx):
                assert time.monotonic() < deadline, "the message was never acked"
                await asyncio.sleep(0.05)
        assert len(calls) == 2
        assert replies[0].accepted == ["r2"]
        assert scheduler.state.backlog() == {"main": 1}
        (taken,), left = await scheduler.pull("main", 8)
        assert (taken.request.request_id, left) == ("r2", 0)


async def test_a_store_redis_py_sent_again_after_a_timeout_is_not_its_own_duplicate(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that when redis-py sends the store script again after a read timeout (its
    retry), the second run answers "stored" for what the first stored, so the request is
    queued and accepted, not reported as a duplicate of itself."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("scheduler", settings) as ctx:
        scheduler = SchedulerShell(ctx, on_ready=no_ready)
        real_eval = ctx.redis.eval

        async def run_twice(*args: Any) -> Any:
            await real_eval(*args)  # ran, its reply lost to a timeout …
            return await real_eval(*args)  # … and redis-py sent the same command again

        monkeypatch.setattr(ctx.redis, "eval", run_twice)
        first = classified_request("r3", ingress_seq=4)
        reply = await scheduler.submit([first])
        assert (reply.accepted, reply.duplicates) == (["r3"], [])
        assert scheduler.state.backlog() == {"p": 1}
        # A real redelivery of the same message later is still a duplicate.
        monkeypatch.setattr(ctx.redis, "eval", real_eval)
        again = await scheduler.submit([first])
        assert (again.accepted, again.duplicates) == ([], ["r3"])
        assert scheduler.state.backlog() == {"p": 1}


async def test_a_request_whose_handoff_keeps_failing_is_answered_unavailable(
    nats_server: ServerProcess, namespace: str, tmp_path: Path
) -> None:
    """Test that a message whose hand-off fails until it is ``handoff_give_up_s`` old ends
    with an ``unavailable`` error to its client and leaves the stream: never silence."""
    store = start_redis(tmp_path / "redis")
    try:
        settings = _settings(namespace, nats_server.url, store.url, handoff_give_up_s=0.5)
        client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
        try:
            subjects = Subjects(namespace)
            errors, _ = await error_replies(client, subjects.client_wildcard("c"))
            async with service_context("classifier", settings) as ctx:
                await ensure_ingress_stream(ctx.js, ctx.subjects)
                scheduler = SchedulerShell(ctx, on_ready=no_ready)
                await ctx.redis.config_set("min-replicas-to-write", 1)
                await ctx.js.publish(subjects.ingress_request, encode(_request(subjects, "r4")))
                async with _classifying(ctx, scheduler.submit):
                    await until(lambda: bool(errors), timeout_s=10.0)
                    deadline = time.monotonic() + 5.0
                    while not await _stream_empty(ctx):
                        assert time.monotonic() < deadline, "the answered message stayed"
                        await asyncio.sleep(0.05)
            assert [(e.code, e.request_id) for e in errors] == [(UNAVAILABLE, "r4")]
        finally:
            await client.close()
    finally:
        store.stop()
