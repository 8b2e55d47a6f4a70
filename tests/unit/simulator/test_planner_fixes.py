"""Unit tests of the simulator-side planner fixes: trend forecast, event re-plan, SLO margin."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.simulator.demand import ArrivalHistory, trend_peak_qps
from loadgen.simulator.results import SimResult
from shared.domain.load_forecast import LoadForecastConfig
from tests.unit.simulator.two_phase import two_phase_run


def test_a_rising_load_forecasts_above_the_recent_max_and_keeps_rising() -> None:
    """Test that the trend forecast extrapolates a rising line past the recent max."""
    forecast = trend_peak_qps([1.0, 2.0, 3.0], steps=3, recent_steps=3)
    assert forecast == pytest.approx((4.0, 5.0, 6.0))


def test_a_falling_or_single_step_load_forecasts_the_recent_max() -> None:
    """Test that without a rising trend the forecast is exactly recent_max."""
    assert trend_peak_qps([5.0, 4.0, 3.0], steps=2, recent_steps=3) == (5.0, 5.0)
    assert trend_peak_qps([2.5], steps=2, recent_steps=3) == (2.5, 2.5)
    with pytest.raises(ValueError):
        trend_peak_qps([], steps=2, recent_steps=3)


def test_the_history_reports_each_steps_largest_bin_per_class() -> None:
    """Test that past peaks are FREESH's largest-bin counts per step, per class."""
    history = ArrivalHistory(LoadForecastConfig(bin_s=5.0, step_s=10.0, steps=2), 4)
    for t_s in (0.5, 1.0, 2.0, 12.0):
        history.add(t_s, "SS")
    history.add(13.0, "LL")
    peaks = history.past_peaks(20.0, 2)
    np.testing.assert_allclose(peaks["SS"], [3 / 5.0, 1 / 5.0])
    np.testing.assert_allclose(peaks["LL"], [0.0, 1 / 5.0])


def _ramp_run(policy: str) -> SimResult:
    return two_phase_run(
        policy,
        gpus=4,
        control={"sample_period_s": 5.0, "epoch_s": 120.0, "steps_per_epoch": 6},
        calm=(0.5, 60.0),
        busy=(4.0, 50.0),
    )


def test_event_replanning_plans_again_when_the_load_outgrows_the_plan() -> None:
    """Test that a load step inside an epoch triggers extra plans only with event re-planning."""
    epoch = _ramp_run("greenserve-planned")
    event = _ramp_run("greenserve-planned-replan")
    assert epoch.plans is not None
    assert event.plans is not None
    assert len(event.plans) > len(epoch.plans)
    peaks = [p["peak_demand_qps"] for p in event.plans if "peak_demand_qps" in p]
    assert max(peaks) > peaks[0]
