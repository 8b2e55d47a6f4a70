"""The ladder's actions in the scheduler: a re-steered request wakes its new pool through
the scheduler's own ready hook; a shed request leaves only once its client was told."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import nats.errors

from proto.keys import Keys
from proto.subjects import Subjects
from services.scheduler.emergency import ResteerRequest, ShedRequest
from services.scheduler.ladder_shell import (
    LadderBook,
    SchedulerQueues,
    apply_actions,
    ladder_config,
)
from services.scheduler.pool_queues import SchedulerState
from shared.config import SchedulerSettings
from tests.factories import classified_request


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def publish(self, subject: str, data: bytes) -> None:
        self.calls.append(("publish", subject))

    async def hset(self, key: str, field: str, value: bytes) -> None:
        self.calls.append(("hset", key, field))


def _ctx(nc: _Recorder, redis: _Recorder) -> Any:
    return SimpleNamespace(
        clock=SimpleNamespace(now=lambda: 0.0),
        nc=nc,
        redis=redis,
        keys=Keys("gs"),
        subjects=Subjects("gs"),
    )


async def _resteer(on_ready: Any) -> tuple[_Recorder, SchedulerState]:
    state = SchedulerState("fcfs")
    state.push(classified_request("r1", pool_id="a"))
    book = LadderBook(ladder_config(SchedulerSettings()), shed=False, clock_hold_s=1.0)
    nc = _Recorder()
    await apply_actions(
        _ctx(nc, _Recorder()),
        book,
        SchedulerQueues(state),
        [("a", ResteerRequest("r1", "a", "b"))],
        on_ready,
    )
    return nc, state


async def test_a_resteer_calls_on_ready_instead_of_publishing() -> None:
    """Test that the co-located path's hook (no NATS) hears the new pool, and the bus not."""
    woken: list[str] = []

    async def on_ready(pool_id: str) -> None:
        woken.append(pool_id)

    nc, state = await _resteer(on_ready)
    assert woken == ["b"]
    assert nc.calls == []
    assert state.backlog() == {"b": 1}


async def test_without_a_hook_a_resteer_publishes_scheduler_ready() -> None:
    """Test the default (a caller without a hook): scheduler.ready of the new pool."""
    nc, _state = await _resteer(None)
    assert nc.calls == [("publish", Subjects("gs").scheduler_ready("b"))]


class _Down(_Recorder):
    """A NATS connection that cannot send to the client's subject (an outage whose buffer
    is full), or only not to ``request.done``."""

    def __init__(self, refuse: str) -> None:
        super().__init__()
        self._refuse = refuse

    async def publish(self, subject: str, data: bytes) -> None:
        if self._refuse in subject:
            raise nats.errors.OutboundBufferLimitError
        await super().publish(subject, data)

    async def hdel(self, key: str, *fields: str) -> None:
        self.calls.append(("hdel", key, *fields))


async def _shed(nc: _Recorder) -> tuple[_Recorder, SchedulerState]:
    state = SchedulerState("fcfs")
    state.push(classified_request("r1", pool_id="a"))
    redis = _Down("-")
    book = LadderBook(ladder_config(SchedulerSettings()), shed=True, clock_hold_s=1.0)
    await apply_actions(
        _ctx(nc, redis), book, SchedulerQueues(state), [("a", ShedRequest("r1", "late"))]
    )
    return redis, state


async def test_a_shed_whose_error_cannot_reach_the_client_stays_queued() -> None:
    """Test that a shed request its client was not told of is neither dropped from the
    queue nor from Redis (it is served instead of left unanswered)."""
    redis, state = await _shed(_Down(classified_request("r1").request.reply_subject))
    assert state.backlog() == {"a": 1}
    assert redis.calls == []


async def test_a_shed_told_to_its_client_is_gone_even_if_its_done_event_is_not_sent() -> None:
    """Test that once the client has its error the request leaves the queue and Redis,
    though the bookkeeping copy failed (else it would be answered twice)."""
    redis, state = await _shed(_Down(".done."))
    assert state.backlog() == {}
    assert redis.calls == [("hdel", Keys("gs").queued, "r1")]
