"""The static baselines' size search (``loadgen.simulator.sizing``)."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.simulator.baselines import baseline_gpu, inventory_slots
from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.pools import build_pools
from loadgen.simulator.scenario import Scenario
from loadgen.simulator.sizing import cleanest_region, servable_attainment, smallest_passing
from loadgen.traces import TraceRequest, synthetic_trace

GOAL = 0.99


def _scenario() -> Scenario:
    """Four TP8 slots of a small model with 2 sequences per instance: capacity is tight."""
    return Scenario.model_validate(
        {
            "name": "sizing",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [{"name": "R", "carbon": "CISO", "gpus": {"H100-80GB": 32}}],
            "engine": {"max_num_seqs": 4},
            "control": {"sample_period_s": 5.0},
        }
    )


def _trace() -> list[TraceRequest]:
    return synthetic_trace(
        rate_rps=28.0, duration_s=30.0, seed=2, mean_prompt_tokens=300, mean_output_tokens=60
    )


def _attainment(instances: int) -> float:
    carbon = CarbonClock({"R": np.full(48, 400.0)}, start_offset_s=3600.0)
    policy = policy_by_name("single-pool", instances=instances)
    return servable_attainment(ClusterSimulator(_scenario(), policy, _trace(), carbon=carbon).run())


def test_the_search_finds_the_smallest_single_pool_that_meets_the_slo() -> None:
    """Test that the bisection's size passes in simulation and one instance fewer fails."""
    search = smallest_passing(_attainment, 4, GOAL)
    assert search.passed
    assert search.instances == 3
    assert search.probes[search.instances] >= GOAL
    below = search.probes.get(search.instances - 1)
    assert (below if below is not None else _attainment(search.instances - 1)) < GOAL
    assert sorted(search.probes) == [2, 3, 4]  # upper first, then halves


@pytest.mark.parametrize("gallop", [False, True])
def test_the_search_returns_the_threshold_of_any_monotone_attainment(gallop: bool) -> None:
    """Test that for every threshold size k the search returns k within log2 probes."""
    upper = 12
    for k in range(1, upper + 1):
        calls: list[int] = []

        def attainment(n: int, k: int = k, calls: list[int] = calls) -> float:
            calls.append(n)
            return 1.0 if n >= k else 0.5

        search = smallest_passing(attainment, upper, GOAL, gallop=gallop)
        assert (search.instances, search.passed) == (k, True)
        assert len(calls) == len(set(calls)) <= 2 * 4 + 1


def test_a_size_that_never_passes_is_reported_as_not_found() -> None:
    """Test that when even the whole inventory misses the goal the search says so."""
    search = smallest_passing(lambda n: 0.5, 6, GOAL)
    assert (search.instances, search.passed) == (6, False)
    assert list(search.probes) == [6]


def test_nothing_servable_fails_the_goal_instead_of_passing_on_nan() -> None:
    """Test that a NaN attainment (every request refused) is not a pass."""
    assert not smallest_passing(lambda n: float("nan"), 3, GOAL).passed


def test_the_carbon_aware_region_is_the_cleanest_one_with_room() -> None:
    """Test that the cleanest region wins only when it holds the pool's slots."""
    scenario = Scenario.model_validate(
        {
            "name": "two",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [
                {"name": "DIRTY", "carbon": "PJM", "gpus": {"H100-80GB": 32}},
                {"name": "CLEAN", "carbon": "BPAT", "gpus": {"H100-80GB": 16}},
            ],
        }
    )
    hourly = {"DIRTY": np.full(48, 500.0), "CLEAN": np.full(48, 50.0)}
    carbon = CarbonClock(hourly, start_offset_s=3600.0)
    found = cleanest_region(scenario, carbon, (0.0, 3600.0), "H100-80GB", 2)
    assert found is not None
    assert found[0] == "CLEAN"
    assert found[1] == {"DIRTY": 500.0, "CLEAN": 50.0}
    found = cleanest_region(scenario, carbon, (0.0, 3600.0), "H100-80GB", 3)
    assert found is not None
    assert found[0] == "DIRTY"
    assert cleanest_region(scenario, carbon, (0.0, 3600.0), "H100-80GB", 5) is None
    assert cleanest_region(scenario, carbon, (0.0, 3600.0), "A100-80GB", 1) is None


def test_the_baselines_use_the_gpu_type_with_the_most_tp8_slots() -> None:
    """Test that a mixed inventory sizes the homogeneous baselines on its majority type."""
    scenario = Scenario.model_validate(
        {
            "name": "mixed",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [
                {"name": "A", "carbon": "CISO", "gpus": {"A100-80GB": 16, "H100-80GB": 8}},
                {"name": "B", "carbon": "PJM", "gpus": {"H100-80GB": 16}},
            ],
        }
    )
    assert baseline_gpu(scenario) == "H100-80GB"
    assert inventory_slots(scenario, gpu_type="H100-80GB") == [
        ("A", "H100-80GB"),
        ("B", "H100-80GB"),
        ("B", "H100-80GB"),
    ]
    pools = build_pools(scenario, policy_by_name("single-pool", instances=2, gpu_type="H100-80GB"))
    assert pools[0].slots == (("A", "H100-80GB"), ("B", "H100-80GB"))
