"""A requeue after a scheduler restart ends what was cancelled before it, on a real
nats-server and redis-server.

The scheduler remembers a cancel in memory and as a Redis mark (docs/protocol.md,
Cancellation). A restarted scheduler has only the mark, and a request its client cancelled
before the restart can still come back to it by ``scheduler.requeue``: refused by a worker,
unplaced, or re-queued by the reaper. It must be ended with ``cancelled``, not queued and
run.
"""

from __future__ import annotations

import asyncio

import pytest

from proto.messages import ClassifiedRequest
from proto.subjects import Subjects
from services.scheduler.service import SchedulerShell
from shared.cancels import CANCELLED_CODE
from shared.counters import CANCELLED
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from shared.store import as_bytes
from tests.factories import client_request, connected_settings, error_replies, no_ready, until

pytestmark = pytest.mark.connected

CLIENT = "c"


def _request(subjects: Subjects, rid: str) -> ClassifiedRequest:
    return client_request(subjects, CLIENT, rid)


def _requeue_cancels() -> float:
    value: float = CANCELLED.labels("scheduler", "requeue")._value.get()
    return value


async def test_a_request_cancelled_before_a_restart_and_requeued_after_it_is_ended(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a restarted scheduler, which has only the Redis marks, ends the requeued
    requests cancelled before its restart (client and ``request.done``), queues the others
    of the same batch, and keeps none of the cancelled ones in ``queued``."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("scheduler", settings) as ctx:
        replies, sub = await error_replies(ctx.nc, ctx.subjects.client_wildcard(CLIENT))
        before = SchedulerShell(ctx, on_ready=no_ready)
        await before.cancel("c.gone")  # placed at the time: the scheduler did not hold it
        await before.cancel("c.left")
        restarted = SchedulerShell(ctx, on_ready=no_ready)  # remembers nothing in memory
        counted = _requeue_cancels()
        batch = ["gone", "kept", "left", "also-kept"]
        await restarted.requeue([_request(ctx.subjects, rid) for rid in batch])
        await until(lambda: len(replies) == 2)
        await restarted.forget_ended()
        queued = {as_bytes(k).decode() for k in await ctx.redis.hkeys(ctx.keys.queued)}
        await asyncio.sleep(0.2)  # a third answer would have come by now
        await sub.unsubscribe()
    assert sorted((e.code, e.request_id) for e in replies) == [
        (CANCELLED_CODE, "gone"),
        (CANCELLED_CODE, "left"),
    ]
    assert _requeue_cancels() == counted + 2
    assert sorted(q.request_id for q in restarted.state.queue("p").ordered(0.0)) == [
        "c.also-kept",
        "c.kept",
    ]
    assert queued == {"c.kept", "c.also-kept"}


async def test_a_requeue_goes_on_when_the_cancel_marks_cannot_be_read(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that a requeue whose mark lookup fails queues its requests (the memory still
    ends those this process heard cancelled): a Redis outage must not lose them."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("scheduler", settings) as ctx:
        shell = SchedulerShell(ctx, on_ready=no_ready)
        await shell.cancel("c.heard")

        async def unreadable(_ids: list[str]) -> set[str]:
            raise ConnectionError("redis away")

        monkeypatch.setattr(shell._cancels, "marked", unreadable)
        await shell.requeue([_request(ctx.subjects, "heard"), _request(ctx.subjects, "other")])
    assert [q.request_id for q in shell.state.queue("p").ordered(0.0)] == ["c.other"]
