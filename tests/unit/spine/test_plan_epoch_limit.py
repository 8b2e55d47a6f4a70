"""The plausibility bound followers put on a plan's epoch (shared.plan_watch)."""

from __future__ import annotations

import pytest

from shared.plan_watch import epoch_limit

EPOCH_S = 1800.0


def test_the_limit_follows_the_later_of_the_plan_in_force_and_the_clock() -> None:
    """Test that the bound is max_ahead past the plan in force or the clock's epoch."""
    assert epoch_limit(-1, 10 * EPOCH_S + 1.0, EPOCH_S, 2) == 12
    assert epoch_limit(20, 10 * EPOCH_S, EPOCH_S, 2) == 22  # a planner ahead of our clock
    assert epoch_limit(3, 0.0, EPOCH_S, 0) == 3


def test_a_far_future_epoch_is_beyond_the_limit() -> None:
    """Test that the escalation's epoch (+2e9) is refused at any realistic model time."""
    now_s = 1_656_633_600.0  # the traces' origin, 2022-07-01
    assert epoch_limit(920_352, now_s, EPOCH_S, 2) < 2_000_000_000


def test_bad_bounds_are_refused() -> None:
    """Test that a non-positive epoch length or a negative allowance is an error."""
    with pytest.raises(ValueError, match="epoch_s"):
        epoch_limit(0, 0.0, 0.0, 2)
    with pytest.raises(ValueError, match="max_ahead"):
        epoch_limit(0, 0.0, EPOCH_S, -1)
