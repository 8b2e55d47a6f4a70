"""The epoch planner choosing TP modes and class-group pools over one region's shared GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.planned import EpochPlanner
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.pools import build_pools
from loadgen.simulator.scenario import Scenario
from loadgen.traces import synthetic_trace
from shared.engine import create_engine

MODES = {
    "plan_demand": "coincident",
    "plan_whole_instances": True,
    "plan_tps": (1, 2),
    "plan_group_pools": True,
    "plan_slices": 16,
}
"""Llama-3-8B fits one H100, so its modes here are TP1 and TP2 (70B's are TP4 and TP8)."""


def _scenario(regions: tuple[tuple[str, str], ...] = (("R", "CISO"),)) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "modes",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [
                {"name": name, "carbon": carbon, "gpus": {"H100-80GB": 4}}
                for name, carbon in regions
            ],
            "engine": {"max_num_seqs": 8},
            "nodes": {"gpus_per_node": 4},
            "control": {"sample_period_s": 5.0, "epoch_s": 120.0, "steps_per_epoch": 6},
            "delays": {"instance_start_s": 5.0},
        }
    )


def test_modes_and_groups_are_pools_over_the_same_gpus() -> None:
    """Test that each (TP, class group) gets its own pool, every one sized to the region's
    whole inventory, so that only the planner's shared GPU count keeps them within it."""
    policy = policy_by_name("min-energy-split-feedback", **MODES)
    pools = build_pools(_scenario(), policy)
    assert sorted(p.pool_id for p in pools) == [
        "R-H100-80GB-tp1-long",
        "R-H100-80GB-tp1-short",
        "R-H100-80GB-tp2-long",
        "R-H100-80GB-tp2-short",
    ]
    assert {p.pool_id: p.max_instances * p.config.tp for p in pools} == dict.fromkeys(
        [p.pool_id for p in pools], 4
    )


def test_shared_gpu_pools_need_the_whole_instance_planner() -> None:
    """Test that TP modes or group pools without whole-instance planning are refused."""
    with pytest.raises(ValueError, match="plan_whole_instances"):
        policy_by_name("min-energy-split-feedback", plan_tps=(4, 8))
    with pytest.raises(ValueError, match="plan_split_long_input"):
        policy_by_name("min-energy", plan_group_pools=True, plan_whole_instances=True)


def test_a_planned_run_over_shared_gpus_serves_everything_within_the_inventory() -> None:
    """Test that the planner's mode switches (bootstrap TP2 fleet to its own plans) never
    hold more GPUs than the region has, serve every request, and plan fewer GPUs than the
    bootstrap's whole fleet for a light load."""
    trace = synthetic_trace(rate_rps=1.0, duration_s=200.0, seed=3, mean_prompt_tokens=300,
                            mean_output_tokens=40)  # fmt: skip
    carbon = CarbonClock({"R": np.full(48, 300.0)}, start_offset_s=3600.0)
    sim = ClusterSimulator(
        _scenario(),
        policy_by_name("min-energy-split-feedback", **MODES),
        trace,
        carbon=carbon,
        carbon_forecast=lambda region, t_s: carbon.forecast(region, t_s),
    )
    result = sim.run()
    assert result.completed == result.requests == len(trace)
    assert result.max_gpus <= 4
    assert result.plans
    planned = [
        sum(n * (2 if "-tp2-" in pid else 1) for pid, n in p["instances"].items())
        for p in result.plans
        if "instances" in p
    ]
    assert planned
    assert min(planned) < 4


def test_a_feedback_derating_holds_for_the_same_mode_and_group_in_every_region() -> None:
    """Test that a capacity de-rating learned on one pool applies to the pools of the same
    GPU type, TP and class group in other regions (the re-plan cannot escape it by moving
    the load there), and to no other mode or group."""
    scenario = _scenario((("A", "CISO"), ("B", "PJM")))
    trace = synthetic_trace(rate_rps=1.0, duration_s=10.0, seed=3)
    sim = ClusterSimulator(scenario, policy_by_name("min-energy-split-feedback", **MODES), trace)
    planner = sim.control.planner
    assert isinstance(planner, EpochPlanner)
    planner.learned.derating["A-H100-80GB-tp1-short"] = 0.5
    assert planner.pool_derating("B-H100-80GB-tp1-short") == 0.5
    assert planner.pool_derating("B-H100-80GB-tp2-short") == 1.0
    assert planner.pool_derating("A-H100-80GB-tp1-long") == 1.0
    rows = planner._profiles()
    for pool in ("A-H100-80GB-tp1-short", "B-H100-80GB-tp1-short"):
        measured = planner.profiles[pool]
        assert [r.max_qps for r in rows[pool]] == [0.5 * r.max_qps for r in measured]


def test_an_arrival_for_a_pool_whose_instances_all_drain_goes_to_a_staffed_pool() -> None:
    """Test that while a TP-mode switch drains a pool's every instance to free GPUs (the
    plan's routes still name it until the new instances are ready), an arrival for it is
    sent to the staffed pool of its class group with the most instances, not queued where
    nobody will serve it; with no pool of its group staffed, to any staffed pool."""
    trace = synthetic_trace(rate_rps=1.0, duration_s=10.0, seed=3)
    sim = ClusterSimulator(_scenario(), policy_by_name("min-energy-split-feedback", **MODES), trace)
    pools = sim.pool_by_id
    draining = pools["R-H100-80GB-tp2-long"]
    assert sim.control.new_instance(draining, 0.0) is not None
    draining.instances[0].draining = True
    assert sim.control.new_instance(pools["R-H100-80GB-tp1-long"], 0.0) is not None
    assert sim.control.new_instance(pools["R-H100-80GB-tp1-short"], 0.0) is not None

    assert sim.staffed(draining, 10.0) is pools["R-H100-80GB-tp1-long"]
    assert sim.staffed(pools["R-H100-80GB-tp1-short"], 10.0) is pools["R-H100-80GB-tp1-short"]
    pools["R-H100-80GB-tp1-long"].instances[0].draining = True
    assert sim.staffed(draining, 10.0) is pools["R-H100-80GB-tp1-short"]


def test_an_orphaned_arrival_goes_to_a_pool_that_serves_now_not_one_still_starting() -> None:
    """Test that of two pools of its class group with one live instance each, an arrival
    whose pool drains is sent to the one whose instance is ready, not the one whose instance
    is still starting (on a node that boots first), whichever comes first in pool order."""
    trace = synthetic_trace(rate_rps=1.0, duration_s=10.0, seed=3)
    scenario = _scenario((("A", "CISO"), ("B", "PJM")))
    sim = ClusterSimulator(scenario, policy_by_name("min-energy-split-feedback", **MODES), trace)
    pools = sim.pool_by_id
    draining = pools["A-H100-80GB-tp2-short"]
    assert sim.control.new_instance(draining, 0.0) is not None
    draining.instances[0].draining = True
    first = sim.control.new_instance(pools["A-H100-80GB-tp1-short"], 0.0)
    second = sim.control.new_instance(pools["B-H100-80GB-tp1-short"], 0.0)
    assert first is not None
    assert second is not None
    first.ready_s, second.ready_s = 100.0, 1.0
    assert sim.staffed(draining, 10.0) is pools["B-H100-80GB-tp1-short"]
    first.ready_s, second.ready_s = 1.0, 100.0
    assert sim.staffed(draining, 10.0) is pools["A-H100-80GB-tp1-short"]


def test_a_long_prompt_pool_floors_at_the_maximum_clock_until_its_p99_prompt_is_observed() -> None:
    """Test that the simulator's MIAD floor for a pool sent the open-ended input bucket is
    the maximum clock before the planner has observed enough served lengths, then the SLO
    floor of the observed p99 long prompt; a short-group pool gets no such floor."""
    trace = synthetic_trace(rate_rps=1.0, duration_s=10.0, seed=3)
    policy = policy_by_name(
        "min-energy-split-feedback",
        **MODES,
        clock="miad",
        miad_slo_floor=True,
        plan_observed_sizes=True,
    )
    sim = ClusterSimulator(_scenario(), policy, trace)
    long_pool = sim.pool_by_id["R-H100-80GB-tp1-long"]
    config = long_pool.config
    top = max(create_engine(config).supported_clocks_mhz)
    control = sim.control
    assert control._served_floor(long_pool.pool_id, config) == pytest.approx(top)
    assert control._served_floor("R-H100-80GB-tp1-short", config) == 0.0
    assert isinstance(control.planner, EpochPlanner)
    observed = control.planner.observed
    assert observed is not None
    for _ in range(observed.settings.min_requests):
        observed.add(2048, 8)
    floor = control._served_floor(long_pool.pool_id, config)
    assert 0.0 < floor < top
