"""Whether the plan in force covers a new forecast: its running instances, current rows."""

from __future__ import annotations

import dataclasses

import pytest

from services.planner.live_inputs import LivePool
from services.planner.live_plan import build_live_problem, pool_decisions
from services.planner.milp import solve_plan
from services.planner.plan_coverage import covers_forecast, running_allocations
from services.planner.plan_model import Plan
from services.planner.problem import (
    Objective,
    PlannerSettings,
    PlanningProblem,
    ServingConfig,
    SloPolicy,
)

POOL = LivePool(pool_id="P", region="r", gpu="H100", tp=1, model="m", workers=("w0", "w1"))
ROW = ServingConfig(
    partition="dynamollm9", request_class="SS", mode="H100-tp1", gpu_type="H100", gpus=1,
    tensor_parallel=1, clock_mhz=None, power_w=500.0, max_qps=8.0, e2e_s=1.0, tbt_ms=20.0,
    ttft_ms=100.0,
)  # fmt: skip
SLICES = 4


def _problem(demand_qps: float, max_qps: float = 8.0) -> PlanningProblem:
    return build_live_problem(
        pools={"P": POOL},
        profiles={"P": (dataclasses.replace(ROW, max_qps=max_qps),)},
        demand_qps={("dynamollm9", "SS"): (demand_qps,) * 6},
        intensity={"r": (1.0,) * 6},
        step_s=10.0,
        alpha=1.0,
        slo=SloPolicy(e2e_mean_scale=None, tbt_ms=None, ttft_ms_by_class={}),
        slices=SLICES,
        instance_idle_w={"P": 100.0},
    )


def _plan(demand_qps: float) -> tuple[Plan, dict[str, int]]:
    problem = _problem(demand_qps)
    core = solve_plan(problem, PlannerSettings(objective=Objective.ENERGY, mip_rel_gap=1e-6))
    decisions = pool_decisions(core, problem, {"P": POOL}, SLICES)
    return core, {pid: d.instances for pid, d in decisions.items()}


def test_the_running_instances_slack_covers_a_forecast_above_the_assigned_load() -> None:
    """Test that a plan of one instance (8 QPS) with 2 of its 4 slices assigned (4 QPS)
    covers a forecast of 7 QPS, which its instance serves, and not one of 9 QPS; judged on
    the assigned slices alone, 7 QPS forced a switch the running instance did not need."""
    core, instances = _plan(3.5)
    assert instances == {"P": 1}
    assert sum(a.instances for a in core.allocations) == 2
    assert covers_forecast(core.allocations, instances, SLICES, _problem(7.0), core.partition)
    assert not covers_forecast(core.allocations, instances, SLICES, _problem(9.0), core.partition)
    running = running_allocations(core.allocations, instances, SLICES, _problem(7.0))
    assert sum(a.instances * a.max_qps for a in running) == pytest.approx(8.0)


def test_coverage_takes_each_row_at_the_capacity_the_new_problem_gives_it() -> None:
    """Test that a row re-measured (or de-rated) to half its capacity makes the same plan
    fall short of a forecast it covered at the planned capacity."""
    core, instances = _plan(3.5)
    assert covers_forecast(core.allocations, instances, SLICES, _problem(7.0), core.partition)
    halved = _problem(7.0, max_qps=4.0)
    assert not covers_forecast(core.allocations, instances, SLICES, halved, core.partition)
