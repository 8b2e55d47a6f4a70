"""FREESH Eq. 1e's relative E2E limit with rows no run measured (live profiles)."""

from __future__ import annotations

from services.planner.problem import SloPolicy
from services.planner.slo_filter import UNMEASURED, e2e_limits, eligible_configs, slo_verdict

from .helpers import config


def test_an_unmeasured_row_does_not_lift_its_class_limit_over_the_slow_modes() -> None:
    """Test that the relative limit (here 2 × mean) runs over the measured rows only: with
    the sentinel in the mean the limit would be ≈ 5e8 s and the 40-s mode would pass."""
    rows = [config(tp=1, e2e=1.0), config(tp=2, e2e=1.0), config(tp=4, e2e=40.0)]
    unmeasured = config(tp=8, e2e=UNMEASURED)
    policy = SloPolicy(e2e_mean_scale=2.0, tbt_ms=None)
    limits = e2e_limits([*rows, unmeasured], policy)
    assert limits[("a", "SS")] == 2.0 * (1.0 + 1.0 + 40.0) / 3
    passed, _ = eligible_configs([*rows, unmeasured], policy)
    kept = {c.tensor_parallel for c in passed}
    assert kept == {1, 2}


def test_an_unmeasured_row_is_rejected_even_without_any_limit() -> None:
    policy = SloPolicy(e2e_mean_scale=None, tbt_ms=None)
    verdict = slo_verdict(config(e2e=UNMEASURED), policy)
    assert verdict.violations == ("e2e never measured",)


def test_a_class_with_no_measured_row_has_no_relative_limit_and_passes_nothing() -> None:
    rows = [config(tp=1, e2e=UNMEASURED), config(tp=2, e2e=UNMEASURED)]
    policy = SloPolicy(tbt_ms=None)
    assert e2e_limits(rows, policy)[("a", "SS")] == float("inf")
    passed, failed = eligible_configs(rows, policy)
    assert passed == ()
    assert len(failed) == 2
