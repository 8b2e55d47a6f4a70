"""The ``milp`` shell retries a failed epoch plan soon, instead of one epoch later."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from proto.codec import decode
from proto.messages import Plan
from services.planner import service
from services.planner.live_service import LivePlanner
from shared.config import PlannerSettings, Settings
from shared.lifecycle import ServiceContext

EPOCH_S = 1800.0


class _Live:
    """A planner whose first plan of an epoch fails, as on a Redis blip at the boundary."""

    def __init__(self, failures: int) -> None:
        self.epoch = -1
        self.plan: Plan | None = None
        self.bootstrapping = False
        self.calls = 0
        self._failures = failures

    async def plan_epoch(self, epoch: int) -> None:
        self.calls += 1
        self.epoch = epoch  # as LivePlanner does, before the step that fails
        if self.calls <= self._failures:
            raise TimeoutError("Timeout reading from redis")
        self.plan = Plan(
            epoch=epoch,
            issued_at=0.0,
            valid_until=1.0,
            scheme="s",
            pools=[],
            routes={},
            objective="milp",
        )

    async def on_done(self, msg: object) -> None:
        pass

    async def on_ready(self, msg: object) -> None:
        pass

    def refresh(self) -> None:
        pass

    async def close(self) -> None:
        pass


class _Sub:
    async def unsubscribe(self) -> None:
        pass


def _ctx(published: list[bytes], republish_s: float) -> ServiceContext:
    async def subscribe(subject: str, cb: Any) -> _Sub:
        return _Sub()

    async def publish(subject: str, payload: bytes) -> None:
        published.append(payload)

    async def set_(key: str, payload: bytes) -> None:
        pass

    planner = PlannerSettings(mode="milp", epoch_s=EPOCH_S, republish_wall_s=republish_s)
    return cast(
        ServiceContext,
        SimpleNamespace(
            settings=Settings().model_copy(update={"planner": planner}),
            clock=SimpleNamespace(now=lambda: 5 * EPOCH_S + 1.0, wall_period=lambda s: s),
            nc=SimpleNamespace(subscribe=subscribe, publish=publish),
            redis=SimpleNamespace(set=set_),
            subjects=SimpleNamespace(
                plan="plan.current",
                request_done_wildcard="request.done.>",
                scheduler_ready_wildcard="scheduler.ready.*",
            ),
            keys=SimpleNamespace(plan="plan"),
            stop=asyncio.Event(),
        ),
    )


async def test_a_failed_epoch_plan_is_retried_within_seconds_not_an_epoch_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Test that after the epoch's plan fails once (a transient Redis timeout) the shell
    plans that epoch again after a short backoff: it marked the epoch planned and went on
    republishing the previous epoch's plan (here the static one) for the whole epoch,
    30 min at real time."""
    published: list[bytes] = []
    ctx = _ctx(published, republish_s=0.05)
    live = _Live(failures=1)
    task = asyncio.create_task(service._serve_milp(ctx, cast(LivePlanner, live)))
    await asyncio.sleep(1.0)
    ctx.stop.set()
    await asyncio.wait_for(task, 5)
    assert live.calls == 2
    assert decode(published[-1], Plan).objective == "milp"
    assert len([r for r in caplog.records if "planning epoch 5 failed" in r.getMessage()]) == 1


async def test_a_plan_that_keeps_failing_is_retried_with_a_growing_backoff() -> None:
    """Test that a plan that fails every time (a solver bug) is not re-solved on every
    republish tick: the retries back off, so the shell does not spin the solver."""
    published: list[bytes] = []
    ctx = _ctx(published, republish_s=0.05)
    live = _Live(failures=10**6)
    task = asyncio.create_task(service._serve_milp(ctx, cast(LivePlanner, live)))
    await asyncio.sleep(1.6)
    ctx.stop.set()
    await asyncio.wait_for(task, 5)
    assert 2 <= live.calls <= 5  # 0, 0.1, 0.3, 0.7, 1.5 s: not one per 0.05-s tick
    assert {decode(p, Plan).objective for p in published} == {"static"}
