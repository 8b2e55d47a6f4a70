"""Tests of the reference forecasters on synthetic series."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.tsa.holtwinters import ExponentialSmoothing

from services.forecaster.baselines import (
    DAY,
    HoltWintersParams,
    holt_winters,
    same_hour_yesterday,
    seven_day_template,
    template_plus_level,
)

PROFILE = 200.0 + 80.0 * np.sin(2 * np.pi * np.arange(DAY) / DAY)


def test_template_plus_level_reproduces_a_purely_periodic_series() -> None:
    """Test that template + level forecasts a repeating day exactly at every horizon."""
    y = np.tile(PROFILE, 40)
    origins = np.array([20 * DAY, 25 * DAY + 5], dtype=np.int64)
    forecast = template_plus_level(y, origins, 48)
    truth = y[origins[:, None] + np.arange(48)[None, :]]
    np.testing.assert_allclose(forecast, truth)


def test_template_plus_level_follows_a_level_step_that_the_template_misses() -> None:
    """Test that after a +50 level step the level term moves the day-1 forecast toward it."""
    y = np.tile(PROFILE, 40)
    origin = 30 * DAY
    y[origin - DAY :] += 50.0
    origins = np.array([origin], dtype=np.int64)
    truth = y[origin : origin + DAY]
    template_error = np.abs(seven_day_template(y, origins, DAY)[0] - truth).mean()
    level_error = np.abs(template_plus_level(y, origins, DAY)[0] - truth).mean()
    assert level_error < 0.7 * template_error
    # the correction fades: the shift is smaller at 24 h than at 1 h
    shift = template_plus_level(y, origins, DAY)[0] - seven_day_template(y, origins, DAY)[0]
    assert shift[0] > shift[-1] > 0


def test_same_hour_yesterday_uses_two_days_back_on_day_two() -> None:
    """Test that day-2 horizons read the same hour two days before (never the future)."""
    y = np.arange(10 * DAY, dtype=np.float64)
    forecast = same_hour_yesterday(y, np.array([5 * DAY], dtype=np.int64), 48)[0]
    assert forecast[0] == y[4 * DAY]
    assert forecast[24] == y[4 * DAY]
    assert forecast[23] == y[5 * DAY - 1]


def test_holt_winters_matches_statsmodels_with_the_same_parameters() -> None:
    """Test that the vectorised recursion equals statsmodels' forecast for a known start."""
    rng = np.random.default_rng(3)
    window = 14 * DAY
    y = np.tile(PROFILE, 30) + rng.normal(0, 5, 30 * DAY) + np.linspace(0, 30, 30 * DAY)
    origin = 29 * DAY
    params = HoltWintersParams(alpha=0.4, beta=0.05, gamma=0.2, phi=0.9)
    ours = holt_winters(y, np.array([origin], dtype=np.int64), 30, params, window_h=window)[0]
    start = origin - window
    last_week = y[origin - 7 * DAY : origin].reshape(7, DAY)
    model = ExponentialSmoothing(
        y[start:origin],
        trend="add",
        damped_trend=True,
        seasonal="add",
        seasonal_periods=DAY,
        initialization_method="known",
        initial_level=y[start : start + DAY].mean(),
        initial_trend=0.0,
        initial_seasonal=last_week.mean(axis=0) - last_week.mean(),
    )
    fitted = model.fit(
        smoothing_level=0.4,
        smoothing_trend=0.05,
        smoothing_seasonal=0.2,
        damping_trend=0.9,
        optimized=False,
    )
    theirs = fitted.forecast(30)
    # At h = m exactly statsmodels reads the seasonal term one season further back; we keep
    # the textbook s[t + h - m(k + 1)], k = floor((h - 1) / m), so that step is left out.
    same = np.arange(30) != DAY - 1
    np.testing.assert_allclose(ours[same], theirs[same], rtol=1e-9)


def test_holt_winters_rejects_a_window_of_partial_days() -> None:
    """Test that a window that is not whole days is refused."""
    params = HoltWintersParams(alpha=0.5, beta=0.1, gamma=0.1, phi=0.9)
    with pytest.raises(ValueError, match="whole number of days"):
        holt_winters(np.ones(40 * DAY), np.array([30 * DAY]), 6, params, window_h=100)
