"""The live planner's SLO feedback adds an instance to a pool that still misses at its
maximum clock (or to a pool of its mode elsewhere when it has no parked worker left), and
takes it away once the pool has met its SLO for a hold."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from nats.aio.msg import Msg
from opentelemetry import trace

from proto.codec import encode
from proto.messages import Completion, CompletionBatch
from services.planner.live_inputs import LivePool
from services.planner.live_service import LivePlanner
from services.planner.problem import PlanningProblem
from shared.clock import ModelClock
from shared.config import Settings
from shared.domain.classes import dynamollm_scheme
from shared.lifecycle import ServiceContext
from tests.unit.planner.helpers import config

MODEL = "llama-3-8b"


def _pool(pool_id: str, region: str, workers: int) -> LivePool:
    names = tuple(f"{pool_id}{k}" for k in range(workers))
    return LivePool(pool_id=pool_id, region=region, gpu="A100-80GB", tp=1, model=MODEL,
                    workers=names)  # fmt: skip


class _Clock:
    """Model time = wall time + a settable offset: the test steps through planning steps
    while completions carry wall times near now."""

    def __init__(self, ctx: SimpleNamespace) -> None:
        self._ctx = ctx
        self._offset = 0.0

    @property
    def offset(self) -> float:
        return self._offset

    @offset.setter
    def offset(self, value: float) -> None:
        self._offset = value
        self._ctx.clock = ModelClock(1.0, 0.0, value)


def _planner(pools: dict[str, LivePool], grow: int) -> tuple[LivePlanner, _Clock]:
    settings = Settings(
        planner={"mode": "milp", "objective": "energy", "alpha": 1.0, "primary_slack": 0.0,
                 "mixed_capacity": False, "whole_instances": False, "observed_profiles": False,
                 "feedback_grow": grow, "epoch_s": 600.0, "steps_per_epoch": 2}
    )  # fmt: skip
    ctx = SimpleNamespace(settings=settings, clock=ModelClock(1.0, 0.0, 0.0),
                          tracer=trace.get_tracer("t"))  # fmt: skip
    planner = LivePlanner(cast(ServiceContext, ctx))
    # A TP1 instance serves 1 req/s of any class at 300 W; TP2 2 req/s at 700 W.
    planner._csv = tuple(
        config(partition="dynamollm9", cls=c, gpu="A100", tp=tp, qps=1.0 * tp, power=power)
        for c in dynamollm_scheme().classes
        for tp, power in ((1, 300.0), (2, 700.0))
    )

    async def inventory() -> dict[str, LivePool]:
        return dict(pools)

    planner._inventory = inventory  # type: ignore[method-assign]
    return planner, _Clock(ctx)


async def _complete(
    planner: LivePlanner, clock: _Clock, pool: str, *, span_s: float, late_s: float, n: int
) -> None:
    """``n`` SS completions of ``pool`` sent over the last ``span_s``, each with its first
    token ``late_s`` after it was sent (SS's TTFT SLO is 250 ms)."""
    del clock  # completions are sent at wall times; the model clock maps them
    now = time.time()
    done = [
        Completion(
            request_id=f"{pool}-{now}-{i}", worker_id="w", pool_id=pool, region="PJM",
            request_class="SS", input_tokens=100, output_tokens=2,
            sent_at=now - span_s + i * span_s / n, accepted_at=0.0,
            first_token_at=now - span_s + i * span_s / n + late_s,
            finished_at=now - span_s + i * span_s / n + late_s + 0.01, energy_j=0.0,
            model=MODEL,
        )
        for i in range(n)
    ]  # fmt: skip
    batch = SimpleNamespace(data=encode(CompletionBatch(completions=done)))
    await planner.on_done(cast(Msg, batch))


def _instances(planner: LivePlanner) -> dict[str, int]:
    assert planner.plan is not None
    return {p.pool_id: p.instances for p in planner.plan.pools}


async def _planned(grow: int, pools: dict[str, LivePool]) -> tuple[LivePlanner, _Clock]:
    planner, clock = _planner(pools, grow)
    clock.offset = -600.0
    await _complete(planner, clock, "a", span_s=600.0, late_s=0.05, n=1200)  # 2 req/s, on time
    clock.offset = 0.0
    await planner.plan_epoch(1)
    assert not planner.bootstrapping
    return planner, clock


async def test_a_pool_still_missing_at_its_maximum_clock_gets_a_parked_worker() -> None:
    pools = {"a": _pool("a", "PJM", 4)}
    planner, clock = await _planned(1, pools)
    assert _instances(planner) == {"a": 2}
    # Misses: the clock is boosted (no cap), no instance yet.
    await _complete(planner, clock, "a", span_s=30.0, late_s=2.0, n=120)
    assert not planner.wants_replan()
    assert _instances(planner) == {"a": 2}
    assert next(p for p in planner.plan.pools if p.pool_id == "a").clock_mhz is None  # type: ignore[union-attr]
    # Still missing after the boost: one more instance, and no more than the limit.
    clock.offset = 40.0
    await _complete(planner, clock, "a", span_s=30.0, late_s=2.0, n=120)
    assert not planner.wants_replan()
    assert _instances(planner) == {"a": 3}
    clock.offset = 120.0
    await _complete(planner, clock, "a", span_s=30.0, late_s=2.0, n=120)
    assert not planner.wants_replan()
    assert _instances(planner) == {"a": 3}
    # A hold (one step, 300 s) after the last miss report without misses: back to the plan.
    clock.offset = 120.0 + 301.0 + 33.0
    await _complete(planner, clock, "a", span_s=30.0, late_s=0.05, n=60)
    assert not planner.wants_replan()
    assert _instances(planner) == {"a": 2}


async def test_a_pool_without_parked_workers_grows_in_its_mode_elsewhere() -> None:
    pools = {"a": _pool("a", "PJM", 2), "b": _pool("b", "CISO", 2), "x": _pool("x", "BPAT", 2)}
    # Another mode (TP2) in a third region: never a host for a TP1 pool's instance.
    pools["x"] = LivePool(pool_id="x", region="BPAT", gpu="A100-80GB", tp=2, model=MODEL,
                          workers=("x0", "x1"))  # fmt: skip
    planner, clock = await _planned(1, pools)
    planned = _instances(planner)
    full = next(pid for pid, n in planned.items() if n == 2)
    other = "b" if full == "a" else "a"
    await _complete(planner, clock, full, span_s=30.0, late_s=2.0, n=120)
    planner.wants_replan()
    clock.offset = 40.0
    await _complete(planner, clock, full, span_s=30.0, late_s=2.0, n=120)
    planner.wants_replan()
    grown = _instances(planner)
    assert grown[full] == 2
    assert grown[other] == planned[other] + 1
    assert grown["x"] == 0
    assert planner.plan is not None
    assert other in {w.pool_id for w in planner.plan.routes["SS"]}


async def _miss_three_windows(planner: LivePlanner, clock: _Clock, n: int) -> None:
    """Three 30-s windows of ``n`` late SS completions of pool a, each judged."""
    for offset in (0.0, 40.0, 80.0):
        clock.offset = offset
        await _complete(planner, clock, "a", span_s=30.0, late_s=2.0, n=n)
        planner.wants_replan()


async def test_a_pool_missing_within_its_planned_load_keeps_the_boost_alone() -> None:
    planner, clock = await _planned(1, {"a": _pool("a", "PJM", 4)})
    # 1 req/s against the 2 req/s planned: the capacity model is off, not the load.
    await _miss_three_windows(planner, clock, n=30)
    assert _instances(planner) == {"a": 2}


async def test_growth_is_off_when_its_limit_is_zero() -> None:
    planner, clock = await _planned(0, {"a": _pool("a", "PJM", 4)})
    await _miss_three_windows(planner, clock, n=120)
    assert _instances(planner) == {"a": 2}


async def test_a_re_plan_within_the_epoch_that_a_shortfall_forces_may_only_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that the live planner re-planning epoch 1 after the load doubled (the running
    plan no longer covers it) solves a problem that holds the running instances' GPUs
    (``min_instances``, ``plan_coverage.adding_only``), and the next epoch's plan a free one."""
    from services.planner import epoch_step

    planner, clock = await _planned(1, {"a": _pool("a", "PJM", 4)})
    assert _instances(planner) == {"a": 2}
    problems: list[PlanningProblem] = []
    step = epoch_step.step

    def capture(problem: PlanningProblem, *args: Any) -> Any:
        problems.append(problem)
        return step(problem, *args)

    monkeypatch.setattr(epoch_step, "step", capture)
    await _complete(planner, clock, "a", span_s=300.0, late_s=0.05, n=1200)  # 4 req/s more
    await planner.plan_epoch(1)
    assert dict(problems[-1].min_instances) == {"a": 2}
    assert _instances(planner)["a"] >= 2
    await planner.plan_epoch(2)
    assert dict(problems[-1].min_instances) == {}
