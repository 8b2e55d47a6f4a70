"""Tests of the planner's SLO feedback (binomial trigger), input groups and measured α."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.simulator.demand import forecast_error_alpha
from loadgen.simulator.feedback import SIGNIFICANCE, binomial_tail
from loadgen.simulator.planned import input_groups


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
