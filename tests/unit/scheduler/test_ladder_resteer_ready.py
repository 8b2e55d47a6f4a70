"""A re-steered request wakes its new pool through the scheduler's own ready hook."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from proto.keys import Keys
from proto.subjects import Subjects
from services.scheduler.emergency import ResteerRequest
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
