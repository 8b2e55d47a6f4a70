"""DynamoLLM's overhead gate in the simulator's epoch planner (``loadgen.simulator.gate``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.planned import EpochPlanner
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.scenario import Scenario
from loadgen.traces import TraceRequest

EPOCH_S = 120.0


def _run(
    after: dict[str, float],
    *,
    gate: bool = True,
    trace: list[TraceRequest] | None = None,
    replan: str = "epoch",
) -> ClusterSimulator:
    """Two identical regions; region A is the cleaner one until the second epoch, then
    the forecast changes to ``after``. Arrivals are evenly spaced (unless ``trace`` is
    given), so every step's demand is the same and the first plan still covers it: only
    the saving can justify a switch."""
    scenario = Scenario.model_validate(
        {
            "name": "gate",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [
                {"name": "A", "carbon": "CISO", "gpus": {"H100-80GB": 2}},
                {"name": "B", "carbon": "PJM", "gpus": {"H100-80GB": 2}},
            ],
            "engine": {"max_num_seqs": 8},
            "control": {"sample_period_s": 5.0, "epoch_s": EPOCH_S, "steps_per_epoch": 6},
            # No node boot: the trace is shorter than one, and the gate is what is tested.
            "delays": {"instance_start_s": 5.0, "node_power_on_s": 0.0},
        }
    )
    if trace is None:
        trace = [TraceRequest(t_s=0.5 * k, prompt_tokens=300, output_tokens=40) for k in range(400)]
    before = {"A": 100.0, "B": 300.0}

    def forecast(region: str, t_s: float) -> float:
        return (after if t_s >= EPOCH_S else before)[region]

    carbon = CarbonClock({r: np.full(48, 300.0) for r in ("A", "B")}, start_offset_s=3600.0)
    sim = ClusterSimulator(
        scenario,
        policy_by_name("greenserve-planned", tp=1, overhead_gate=gate, replan=replan),
        trace,
        carbon=carbon,
        carbon_forecast=forecast,
    )
    result = sim.run()
    assert result.completed == len(trace)
    return sim


def _served_in_b_after_the_second_plan(sim: ClusterSimulator) -> int:
    """Requests placed in region B after the second plan (before the first plan every
    instance serves: the bootstrap)."""
    return sum(
        1
        for s in sim.states
        if s.instance is not None and s.instance.region == "B" and s.placed_s >= EPOCH_S
    )


def _planner(sim: ClusterSimulator) -> EpochPlanner:
    planner = sim.control.planner
    assert isinstance(planner, EpochPlanner)
    return planner


def _second_epoch(sim: ClusterSimulator) -> dict[str, Any]:
    solves: list[dict[str, Any]] = _planner(sim).solves
    assert solves[0]["instances"]["A-H100-80GB"] > 0
    assert solves[0]["instances"]["B-H100-80GB"] == 0
    second: dict[str, Any] = next(s for s in solves if s["t_s"] == EPOCH_S)
    assert second["instances"]["B-H100-80GB"] > 0, "the solver should prefer B now"
    return second


def test_a_replan_whose_saving_is_below_its_cost_is_rejected() -> None:
    """Test that B cleaner by 1 g/kWh does not pay for starting instances there: plan kept."""
    sim = _run({"A": 300.0, "B": 299.0})
    gate = _second_epoch(sim)["gate"]
    assert not gate["reconfigure"]
    assert 0.0 < gate["saving"] < gate["transition_cost"]
    plan = _planner(sim).plan
    assert plan is not None
    assert plan.epoch == 0, "the first plan stays in force"
    assert not _served_in_b_after_the_second_plan(sim)


def test_the_same_replan_goes_through_without_the_gate_and_a_large_saving_passes_it() -> None:
    """Test that the rejection is the gate's: without it, or with a real saving, B serves."""
    for sim in (_run({"A": 300.0, "B": 299.0}, gate=False), _run({"A": 600.0, "B": 100.0})):
        second = _second_epoch(sim)
        assert second.get("gate", {"reconfigure": True})["reconfigure"]
        assert _served_in_b_after_the_second_plan(sim)


def test_a_rejected_replan_leaves_the_feedback_capacity_of_the_plan_in_force() -> None:
    """Test that the per-pool capacity SLO feedback de-rates against is the running plan's.

    ``EpochPlanner._missing`` compares a pool's observed load with ``capacity[pool]``; after
    the gate keeps the first plan (B not serving), B's capacity must stay that plan's 0, not
    the rejected re-plan's, or a miss would be measured against a plan that never ran.
    """
    sim = _run({"A": 300.0, "B": 299.0})
    planner = _planner(sim)
    assert not _second_epoch(sim)["gate"]["reconfigure"]
    running = planner.gate.running
    assert running is not None
    in_force = {pid: sum(d.capacity_by_class.values()) for pid, d in running[1].items()}
    assert planner.capacity == in_force
    assert planner.capacity["B-H100-80GB"] == 0.0


def test_a_rejected_replan_leaves_the_planned_demand_of_the_plan_in_force() -> None:
    """Test that ``planned_qps`` is what the running plan was sized for, not the rejected one.

    The load steps from 2 to 2.3 requests/s after the first plan (sized for α × 2 = 2.2
    QPS). The second epoch's plan, sized for α × 2.4, moves to B, 1 g/kWh cleaner: the gate
    rejects it, and the first plan stays in force. The event trigger (``_outgrown``) compares
    the observed load with ``planned_qps``, so it must stay 2.2: the rejected plan's 2.64
    would let the load outgrow the running plan unnoticed.
    """
    trace = [TraceRequest(t_s=0.5 * k, prompt_tokens=300, output_tokens=40) for k in range(60)]
    trace += [
        TraceRequest(t_s=30.0 + k / 2.3, prompt_tokens=300, output_tokens=40) for k in range(391)
    ]
    sim = _run({"A": 300.0, "B": 299.0}, trace=trace)
    planner = _planner(sim)
    first, second = planner.solves[0], _second_epoch(sim)
    assert not second["gate"]["reconfigure"]
    sized = [s["alpha"] * s["peak_demand_qps"] for s in (first, second)]
    assert sized[1] > sized[0]
    assert planner.planned_qps == pytest.approx(sized[0])


def test_event_replanning_does_not_ask_the_gate_again_below_what_it_said_is_covered() -> None:
    """Test that a rejected event re-plan is not re-solved every sample period.

    The same load step as above, with ``replan="event"``: the observed 2.3 requests/s
    outgrow the first plan's 2.2 and the re-plan (sized for 2.64) is rejected, since the
    running plan covers it. Compared with ``planned_qps`` alone the load stayed "outgrown",
    and the planner solved every 5-s sample until the epoch, each solve rejected (15 solves
    between 45 and 115 s); the next solve is now the epoch's own.
    """
    trace = [TraceRequest(t_s=0.5 * k, prompt_tokens=300, output_tokens=40) for k in range(60)]
    trace += [
        TraceRequest(t_s=30.0 + k / 2.3, prompt_tokens=300, output_tokens=40) for k in range(391)
    ]
    planner = _planner(_run({"A": 300.0, "B": 299.0}, trace=trace, replan="event"))
    times = [s["t_s"] for s in planner.solves]
    event = [t for t in times if 0.0 < t < EPOCH_S and t != times[0]]
    assert len(event) == 1, times
    assert not planner.solves[1]["gate"]["reconfigure"]
    assert planner.planned_qps is not None
    assert planner.covered_qps is not None
    assert planner.covered_qps > planner.planned_qps
