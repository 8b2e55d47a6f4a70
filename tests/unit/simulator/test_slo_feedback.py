"""Tests of the planner's SLO feedback (binomial trigger), input groups and measured α."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.demand import forecast_error_alpha
from loadgen.simulator.planned import EpochPlanner, input_groups
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.scenario import Scenario
from loadgen.traces import synthetic_trace
from services.planner.slo_feedback import SIGNIFICANCE, binomial_tail


def test_binomial_tail_matches_the_exact_sum() -> None:
    """Test P(X ≥ k) against a direct sum on a small case and its edge cases."""
    exact = sum(math.comb(10, k) * 0.2**k * 0.8 ** (10 - k) for k in range(3, 11))
    assert binomial_tail(3, 10, 0.2) == pytest.approx(exact)
    assert binomial_tail(0, 10, 0.2) == 1.0
    assert binomial_tail(11, 10, 0.2) == 0.0


def test_a_pool_at_the_goal_is_not_short_but_a_missing_one_is() -> None:
    """Test that 1 miss in 100 at a 1 % goal passes and 10 in 100 is significant."""
    assert binomial_tail(1, 100, 0.01) > SIGNIFICANCE
    assert binomial_tail(2, 100, 0.01) > SIGNIFICANCE
    assert binomial_tail(10, 100, 0.01) < SIGNIFICANCE


def test_input_groups_set_the_longest_input_bucket_apart() -> None:
    """Test that only the last input label's classes form the long group."""
    groups = input_groups(("SS", "ML", "LS", "LL"), ("S", "M", "L"))
    assert groups == {"SS": "short", "ML": "short", "LS": "long", "LL": "long"}


def test_alpha_is_the_worst_past_ratio_of_realised_to_forecast_peak() -> None:
    """Test α from the live forecast's errors: the goal quantile of ratios, never below 1."""
    rising = {"SS": np.array([1.0, 2.0, 2.0]), "LL": np.array([1.0, 1.0, 1.0])}
    # Step 1: forecast 1 + 1, realised 2 + 1; step 2: forecast 2 + 1, realised 2 + 1.
    assert forecast_error_alpha(rising, 3, 0.99) == pytest.approx(1.5)
    falling = {"SS": np.array([3.0, 2.0, 1.0])}
    assert forecast_error_alpha(falling, 3, 0.99) == 1.0
    assert forecast_error_alpha({"SS": np.array([2.0])}, 3, 0.99) is None


def test_a_split_plan_routes_each_pool_one_input_group_only() -> None:
    """Test, end to end on a two-region toy, that no pool is routed both input groups."""
    scenario = Scenario.model_validate(
        {
            "name": "split",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [
                {"name": "A", "carbon": "CISO", "gpus": {"H100-80GB": 2}},
                {"name": "B", "carbon": "PJM", "gpus": {"H100-80GB": 2}},
            ],
            "engine": {"max_num_seqs": 16},
            "control": {"sample_period_s": 5.0, "epoch_s": 60.0, "steps_per_epoch": 6},
            "delays": {"instance_start_s": 2.0},
        }
    )
    trace = synthetic_trace(rate_rps=3.0, duration_s=90.0, seed=3, mean_prompt_tokens=900,
                            mean_output_tokens=60)  # fmt: skip
    sim = ClusterSimulator(scenario, policy_by_name("min-energy-split", tp=1), trace)
    result = sim.run()
    planner = sim.control.planner
    assert isinstance(planner, EpochPlanner)
    assert result.plans
    assert planner.plan is not None
    groups = input_groups(sim.scheme.classes, sim.scheme.labels)
    served: dict[str, set[str]] = {}
    for cls, weights in planner.plan.routes.items():
        for route in weights:
            if cls != "*" and route.weight > 0:
                served.setdefault(route.pool_id, set()).add(groups[cls])
    assert served
    assert all(len(g) == 1 for g in served.values())
