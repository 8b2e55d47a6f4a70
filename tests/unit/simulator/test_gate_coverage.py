"""The simulator's overhead gate judges the running plan with the capacities planned now."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from loadgen.simulator import gate as gate_module
from loadgen.simulator.gate import PlanGate
from services.planner.live_inputs import LivePool
from services.planner.live_plan import PoolDecision, build_live_problem, pool_decisions
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

POOL = LivePool(pool_id="P", region="r", gpu="H100", tp=1, model="m", workers=("w0", "w1", "w2"))
ROW = ServingConfig(
    partition="dynamollm9", request_class="SS", mode="H100-tp1", gpu_type="H100", gpus=1,
    tensor_parallel=1, clock_mhz=None, power_w=500.0, max_qps=10.0, e2e_s=1.0, tbt_ms=20.0,
    ttft_ms=100.0,
)  # fmt: skip


def _planned(
    max_qps: float, demand_qps: float
) -> tuple[PlanningProblem, Plan, dict[str, PoolDecision]]:
    problem = build_live_problem(
        pools={"P": POOL},
        profiles={"P": (dataclasses.replace(ROW, max_qps=max_qps),)},
        demand_qps={("dynamollm9", "SS"): (demand_qps,) * 6},
        intensity={"r": (1.0,) * 6},
        step_s=10.0,
        alpha=1.0,
        slo=SloPolicy(e2e_mean_scale=None, tbt_ms=None, ttft_ms_by_class={}),
        slices=1,
    )
    core = solve_plan(problem, PlannerSettings(objective=Objective.ENERGY))
    return problem, core, pool_decisions(core, problem, {"P": POOL}, 1)


def test_a_feedback_replan_is_forced_when_the_running_plan_misses_at_the_learned_capacity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that the gate prices the running plan's coverage with the de-rated rows.

    The running plan gave 1 instance at 10 QPS for 8 QPS of demand. SLO feedback then learns
    the pool serves only half its profile (5 QPS per instance) and re-plans: 2 instances.
    Judged with the capacities the running plan was made with (10 ≥ 8) the gate would see
    a covering plan and reject the re-plan as costing more power; at the learned capacity
    (5 < 8) the running plan misses the forecast, which forces the switch (SLO first,
    DynamoLLM §2.3 as the gate's docstring states it).
    """
    monkeypatch.setattr(gate_module, "instance_idle_w", lambda config: 100.0)
    old_problem, old_core, old_decisions = _planned(10.0, 8.0)
    new_problem, new_core, new_decisions = _planned(5.0, 8.0)
    assert old_decisions["P"].instances == 1
    assert new_decisions["P"].instances == 2
    held = {pid: d.instances for pid, d in old_decisions.items()}
    # What the planner hands the gate (planned._plan): coverage under the new problem's rows.
    at_learned = covers_forecast(old_core.allocations, held, 1, new_problem, old_core.partition)
    at_planned = covers_forecast(old_core.allocations, held, 1, old_problem, old_core.partition)
    assert not at_learned
    assert at_planned
    planner = SimpleNamespace(
        objective=Objective.ENERGY,
        pools={"P": POOL},
        epoch_s=60.0,
        slices=1,
        live=SimpleNamespace(gate_margin=1.0),
        view=SimpleNamespace(
            scenario=SimpleNamespace(
                delays=SimpleNamespace(instance_start_s=5.0, clock_change_s=0.1)
            ),
            pool_by_id={"P": SimpleNamespace(config=None)},
        ),
    )
    gate = PlanGate(planner)  # type: ignore[arg-type]
    old, intensity = (old_core, old_decisions), {"r": (1.0,) * 6}
    decision = gate.decide(old, new_core, new_decisions, intensity, 0.0, old_covers=at_learned)
    assert decision.reconfigure, decision.reason
    assert "no longer covers" in decision.reason
    # Judged at the planned capacity the running plan covers, and the dearer re-plan is kept out.
    kept = gate.decide(old, new_core, new_decisions, intensity, 0.0, old_covers=at_planned)
    assert not kept.reconfigure, kept.reason
