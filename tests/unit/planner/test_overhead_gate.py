"""Tests of DynamoLLM's reconfiguration gate."""

from __future__ import annotations

import pytest

from services.planner.overhead_gate import (
    TransitionCosts,
    count_transitions,
    gate_plans,
    reconfiguration_gate,
    transition_cost,
)
from services.planner.plan_model import Allocation


def _alloc(
    cls: str,
    tp: int,
    instances: int,
    *,
    clock: float | None = None,
    power: float = 100.0,
    region: str = "r1",
) -> Allocation:
    return Allocation(
        region=region, partition="a", request_class=cls, gpu_type="A100", tensor_parallel=tp,
        clock_mhz=clock, instances=instances, gpus_per_instance=tp, power_w=power, max_qps=1.0,
    )  # fmt: skip


def test_gate_switches_only_when_saving_beats_transition_cost() -> None:
    """Test that (P_old − P_new) × remaining time must exceed the cost."""
    yes = reconfiguration_gate(old_rate=500, new_rate=400, remaining_s=100, transition=9_000)
    no = reconfiguration_gate(old_rate=500, new_rate=400, remaining_s=80, transition=9_000)
    assert yes.reconfigure
    assert yes.saving == pytest.approx(10_000)
    assert not no.reconfigure


def test_gate_forces_a_switch_when_the_old_plan_misses_demand() -> None:
    """Test that an old plan that no longer covers the forecast is replaced regardless."""
    decision = reconfiguration_gate(
        old_rate=100, new_rate=900, remaining_s=600, transition=1e9, old_covers_demand=False
    )
    assert decision.reconfigure


def test_clock_only_changes_count_as_cheap_reclocks() -> None:
    """Test that moving instances between clocks of a pool is priced as re-clocks."""
    old = (_alloc("SS", 4, 2, clock=1980.0),)
    new = (_alloc("SS", 4, 2, clock=1200.0), _alloc("SS", 2, 1))
    counts = count_transitions(old, new)
    assert counts[("r1", "A100", 4, "a", "SS")].reclocks == 2
    assert counts[("r1", "A100", 2, "a", "SS")].starts == 1
    costs = TransitionCosts(start_s=10.0, start_power_w_per_gpu=100.0, reclock_j_per_gpu=1.0)
    assert transition_cost(old, new, costs) == pytest.approx(2 * 4 * 1.0 + 10.0 * 2 * 100.0)


def test_a_reclock_is_charged_for_every_gpu_of_the_instance() -> None:
    """Test that re-clocking a TP4 instance costs four GPUs' clock sets, a TP1 one one.

    The clock is set on every GPU of a tensor-parallel instance and throttLL'eM §3.3/§7
    prices a frequency set per GPU (8 ms per GPU); the default is 80 ms × 110 W per GPU.
    """
    per_gpu = 0.08 * 110.0
    for tp in (1, 4, 8):
        old = (_alloc("SS", tp, 3, clock=1980.0),)
        new = (_alloc("SS", tp, 3, clock=1200.0),)
        assert transition_cost(old, new, TransitionCosts()) == pytest.approx(3 * tp * per_gpu)


def test_gate_plans_weighs_a_startup_against_the_power_saved() -> None:
    """Test that replacing a 400 W TP8 by a 150 W TP4 pays off only with enough time left."""
    old = (_alloc("SS", 8, 1, power=400.0),)
    new = (_alloc("SS", 4, 1, power=150.0),)
    costs = TransitionCosts(start_s=33.0, start_power_w_per_gpu=110.0)
    start_j = 33.0 * 4 * 110.0
    assert gate_plans(old, new, remaining_s=start_j / 250.0 + 1, costs=costs).reconfigure
    assert not gate_plans(old, new, remaining_s=start_j / 250.0 - 1, costs=costs).reconfigure
