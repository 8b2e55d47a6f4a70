"""Tests of the per-class peak-QPS load forecaster (FREESH §2.5)."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.load_forecast import (
    LoadForecastConfig,
    backtest_load,
    forecast_peak_qps,
    load_azure_trace,
    peak_qps_per_step,
)


def test_peak_qps_is_the_largest_five_second_count_over_five() -> None:
    """Test the FREESH aggregation on hand-made arrivals."""
    config = LoadForecastConfig(step_s=10.0, steps=2)
    arrivals = [0.1, 0.2, 0.3, 6.0, 11.0, 12.0]
    np.testing.assert_allclose(peak_qps_per_step(arrivals, 0.0, 2, config), [0.6, 0.4])


def test_ewma_weights_recent_steps_more_and_last_repeats_the_newest() -> None:
    """Test that the EWMA sits between old and new peaks, closer to the new one."""
    past = [1.0, 1.0, 1.0, 5.0]
    ewma = forecast_peak_qps(past, LoadForecastConfig(method="ewma", ewma_alpha=0.5))
    assert ewma.shape == (6,)
    assert 3.0 < ewma[0] < 5.0
    assert forecast_peak_qps(past, LoadForecastConfig(method="last"))[0] == 5.0
    with pytest.raises(ValueError, match="at least one"):
        forecast_peak_qps([], LoadForecastConfig())


def test_template_repeats_yesterday_scaled_by_the_level_change() -> None:
    """Test that with a day of history the template copies the same steps a period ago."""
    config = LoadForecastConfig(method="template", step_s=300.0, period_s=1800.0, steps=2)
    past = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    np.testing.assert_allclose(forecast_peak_qps(past, config), [4.0, 8.0])


def test_backtest_on_the_azure_conversation_trace_scores_full_epochs() -> None:
    """Test that the backtest runs on the real trace and reports finite scores."""
    report = backtest_load({"conv": load_azure_trace("conv")}, LoadForecastConfig())
    scores = report["conv"]
    assert scores["origins"] >= 20
    assert 0.0 < scores["mape_epoch_pct"] < 100.0
    assert 0.0 <= scores["under_alpha_rate"] <= 1.0
