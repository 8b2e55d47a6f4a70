"""Whether the plan in force covers a new forecast: its running instances, any class mix of
their group, current rows."""

from __future__ import annotations

import dataclasses

from services.planner.live_inputs import LivePool
from services.planner.live_plan import build_live_problem, pool_decisions
from services.planner.milp import solve_plan
from services.planner.plan_coverage import covers_forecast
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


def _problem(
    demand_qps: float, max_qps: float = 8.0, sm_qps: float = 0.0, sm_max_qps: float = 4.0
) -> PlanningProblem:
    sm = dataclasses.replace(ROW, request_class="SM", max_qps=sm_max_qps)
    return build_live_problem(
        pools={"P": POOL},
        profiles={"P": (dataclasses.replace(ROW, max_qps=max_qps), sm)},
        demand_qps={
            ("dynamollm9", "SS"): (demand_qps,) * 6,
            ("dynamollm9", "SM"): (sm_qps,) * 6,
        },
        intensity={"r": (1.0,) * 6},
        step_s=10.0,
        alpha=1.0,
        slo=SloPolicy(e2e_mean_scale=None, tbt_ms=None, ttft_ms_by_class={}),
        slices=SLICES,
        instance_idle_w={"P": 100.0},
    )


def _plan(demand_qps: float, sm_qps: float = 0.0) -> tuple[Plan, dict[str, int]]:
    problem = _problem(demand_qps, sm_qps=sm_qps)
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


def test_coverage_takes_each_row_at_the_capacity_the_new_problem_gives_it() -> None:
    """Test that a row re-measured (or de-rated) to half its capacity makes the same plan
    fall short of a forecast it covered at the planned capacity."""
    core, instances = _plan(3.5)
    assert covers_forecast(core.allocations, instances, SLICES, _problem(7.0), core.partition)
    halved = _problem(7.0, max_qps=4.0)
    assert not covers_forecast(core.allocations, instances, SLICES, halved, core.partition)


def test_a_class_mix_that_shifts_within_the_running_capacity_is_covered() -> None:
    """Test that a plan whose one instance the solution split between SS and SM (2 QPS of
    each: one slice of SS at 2 QPS, two of SM at 1 QPS, 3 of its 4 slices) covers a
    forecast of 6 QPS SS and no SM, which the same instance serves in another split (3
    slices), and not 6 QPS SS with 2 QPS SM (3 + 2 = 5 slices > 4); checked class by class
    against the solution's own split, the first forced a re-plan."""
    core, instances = _plan(2.0, sm_qps=2.0)
    assert instances == {"P": 1}
    assigned = {a.request_class: a.instances for a in core.allocations}
    assert assigned == {"SS": 1, "SM": 2}
    assert covers_forecast(core.allocations, instances, SLICES, _problem(6.0), core.partition)
    busier = _problem(6.0, sm_qps=2.0)
    assert not covers_forecast(core.allocations, instances, SLICES, busier, core.partition)


def test_a_re_plan_that_may_only_add_switches_no_mode_over_gpus_running_instances_hold() -> None:
    """Test that over one region's 8 shared GPUs, where 4.5 QPS would switch the running
    TP4 instance to a TP8 one (its mode serves more per GPU; the TP4 instance must drain
    first to free the GPUs), a problem that may only add keeps the TP4 instance's GPUs and
    adds a second TP4 instance beside it, short of the forecast (the least shortfall)."""
    from services.planner.plan_coverage import adding_only
    from tests.unit.planner.test_live_modes import _pool

    pools = {"tp4": _pool("tp4", "A", 4, 2), "tp8": _pool("tp8", "A", 8, 1)}
    rows = {"tp4": (2.0, 500.0), "tp8": (5.0, 900.0)}

    def _row(tp: int, qps: float, watts: float) -> ServingConfig:
        return dataclasses.replace(
            ROW, tensor_parallel=tp, mode=f"H100-tp{tp}", max_qps=qps, power_w=watts
        )

    def solve(held: dict[str, int] | None) -> tuple[str, dict[str, int]]:
        problem = build_live_problem(
            pools=pools,
            profiles={pid: (_row(pools[pid].tp, q, w),) for pid, (q, w) in rows.items()},
            demand_qps={("dynamollm9", "SS"): (4.5,) * 6},
            intensity={"A": (1.0,) * 6},
            step_s=10.0,
            alpha=1.0,
            slo=SloPolicy(e2e_mean_scale=None, tbt_ms=None, ttft_ms_by_class={}),
            slices=SLICES,
            instance_idle_w={"tp4": 300.0, "tp8": 600.0},
            shared_gpus={("A", "H100"): 8},
        )
        if held is not None:
            problem = adding_only(problem, held)
        core = solve_plan(problem, PlannerSettings(objective=Objective.ENERGY, mip_rel_gap=1e-6))
        decisions = pool_decisions(core, problem, pools, SLICES)
        return core.status.value, {pid: d.instances for pid, d in decisions.items()}

    assert solve(None) == ("optimal", {"tp4": 0, "tp8": 1})
    assert solve({"tp4": 1, "tp8": 0}) == ("fallback_shortfall", {"tp4": 2, "tp8": 0})
