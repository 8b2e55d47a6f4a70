"""Tests of the p10/p90 band from recent realised errors (rolling split conformal)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from services.forecaster.bands import IssuedForecasts, recent_log_quantiles, rolling_bands
from services.forecaster.models import CarbonForecast
from tests.factories import intensity_history

H = 48
Z90 = 1.2816  # standard normal 90th percentile


def _daily(days: int, sigma: np.ndarray, seed: int = 3) -> tuple[np.ndarray, ...]:
    """Daily origins (hour indices) with a flat forecast and log-normal errors of spread
    ``sigma[day]`` on the target day: (origins, forecasts, actual, observed)."""
    rng = np.random.default_rng(seed)
    origins = np.arange(days, dtype=np.int64) * 24 + 1_000
    forecasts = np.full((days, H), 300.0)
    # One actual per hour, shared by every origin that forecasts it.
    hours = np.arange(origins[0], origins[-1] + H)
    day_of_hour = np.minimum((hours - origins[0]) // 24, days - 1)
    truth = 300.0 * np.exp(rng.normal(0.0, 1.0, len(hours)) * sigma[day_of_hour])
    targets = origins[:, None] + np.arange(H)[None, :] - origins[0]
    return origins, forecasts, truth[targets], np.ones((days, H))


def test_no_band_until_the_issued_forecasts_span_the_minimum() -> None:
    """Test that two weeks of issued forecasts are needed, and that only errors of issued
    forecasts in the window count (one outside it changes nothing)."""
    origins, forecasts, actual, observed = _daily(40, np.full(40, 0.1))
    assert recent_log_quantiles(origins[:13], forecasts[:13], actual[:13], observed[:13],
                                int(origins[13])) is None  # fmt: skip
    assert recent_log_quantiles(origins[:14], forecasts[:14], actual[:14], observed[:14],
                                int(origins[14])) is not None  # fmt: skip
    at = int(origins[39])
    full = recent_log_quantiles(origins[:39], forecasts[:39], actual[:39], observed[:39], at)
    assert full is not None
    changed = actual.copy()
    changed[:10] *= 5.0  # issued more than 28 days before ``at``
    again = recent_log_quantiles(origins[:39], forecasts[:39], changed[:39], observed[:39], at)
    assert again is not None
    assert np.array_equal(again, full)


def test_actuals_from_the_origin_on_are_never_read() -> None:
    """Test no look-ahead: every actual at or after the band's data end + 1 may change
    without changing the band."""
    origins, forecasts, actual, observed = _daily(30, np.full(30, 0.1))
    at = int(origins[29])
    before = recent_log_quantiles(origins[:29], forecasts[:29], actual[:29], observed[:29], at)
    future = (origins[:29, None] + np.arange(H)[None, :]) >= at
    assert future.any()
    scrambled = np.where(future, actual[:29] * 7.0, actual[:29])
    after = recent_log_quantiles(origins[:29], forecasts[:29], scrambled, observed[:29], at)
    assert before is not None
    assert after is not None
    assert np.array_equal(before, after)


def test_the_band_matches_the_error_spread_and_follows_a_change_in_it() -> None:
    """Test that the quantiles of log-normal errors of spread 0.1 are ±1.28 × 0.1, and that
    when the spread doubles the recent band covers ≈ 80 % again while a band fixed on the
    calm days covers far less (the autumn under-coverage this band is for)."""
    days = 120
    sigma = np.where(np.arange(days) < 60, 0.1, 0.2)
    origins, forecasts, actual, observed = _daily(days, sigma)
    calm = recent_log_quantiles(origins[:50], forecasts[:50], actual[:50], observed[:50],
                                int(origins[50]))  # fmt: skip
    assert calm is not None
    # About 140 errors a horizon (28 days x 5 pooled horizons): each quantile is off by
    # ~0.012 at one sigma; their mean over the 48 horizons much less.
    assert calm[:, 0].mean() == pytest.approx(-Z90 * 0.1, abs=0.01)
    assert calm[:, 1].mean() == pytest.approx(Z90 * 0.1, abs=0.01)
    assert calm[:, 0] == pytest.approx(-Z90 * 0.1, abs=0.04)
    assert calm[:, 1] == pytest.approx(Z90 * 0.1, abs=0.04)
    fixed = (forecasts * np.exp(calm[:, 0]), forecasts * np.exp(calm[:, 1]))
    p10, p90, recent = rolling_bands(origins, forecasts, actual, observed, fixed)
    assert not recent[:14].any()
    assert recent[14:].all()
    assert np.array_equal(p10[:14], fixed[0][:14])
    late = slice(95, days)  # the recent window holds only the wide days by then

    def coverage(low: np.ndarray, high: np.ndarray) -> float:
        return float(((actual[late] >= low[late]) & (actual[late] <= high[late])).mean())

    assert coverage(p10, p90) == pytest.approx(0.8, abs=0.06)
    assert coverage(*fixed) < 0.55


def test_the_live_service_bands_its_forecasts_as_the_backtest_does() -> None:
    """Test that daily forecasts banded one by one as issued (the live service) get the
    band the backtest's rolling computation gives the same origins, and that hours not
    yet observed (a gap) are simply left out."""
    days = 40
    origins, forecasts, actual, observed = _daily(days, np.full(days, 0.15))
    start = pd.Timestamp("2024-03-01", tz="UTC")
    hours = np.arange(origins[0], origins[-1] + H)
    truth = np.empty(len(hours))
    truth[(origins[:, None] + np.arange(H)[None, :] - origins[0]).ravel()] = actual.ravel()
    truth[100] = np.nan  # a gap in the telemetry
    history = intensity_history(truth, start)
    observed = np.isfinite(truth)[origins[:, None] + np.arange(H)[None, :] - origins[0]]
    validation = (forecasts * 0.9, forecasts * 1.1)
    p10, p90, _ = rolling_bands(
        origins, forecasts, np.nan_to_num(actual, nan=1.0), observed.astype(float), validation
    )
    issued = IssuedForecasts()
    for i in range(days):
        origin = start + pd.Timedelta(hours=int(origins[i] - origins[0]))
        forecast = CarbonForecast(
            region="SYN",
            issued_at=origin,
            step_s=3600,
            values=tuple(forecasts[i]),
            p10=tuple(validation[0][i]),
            p90=tuple(validation[1][i]),
            signal="average",
            emission_factor="lifecycle",
            model="test",
        )
        banded = issued.banded(forecast, history)
        assert banded.p10 == pytest.approx(tuple(p10[i]), rel=1e-9), i
        assert banded.p90 == pytest.approx(tuple(p90[i]), rel=1e-9), i
        assert banded.values == forecast.values
    assert len(issued) <= 29  # older issues are dropped
