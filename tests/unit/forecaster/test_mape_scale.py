"""Tests of the blend's MAPE-optimal scale (``mape_scale``; docs/forecaster.md)."""

from __future__ import annotations

import numpy as np
import pytest

from services.forecaster.blend import mape_by_horizon, mape_scale
from services.forecaster.config import BUCKETS
from services.forecaster.features import to_grid
from services.forecaster.models import CarbonForecaster
from services.forecaster.sources import CarbonHistory


def _mape(forecast: np.ndarray, actual: np.ndarray) -> float:
    return float(mape_by_horizon(forecast, actual, np.ones_like(actual)).mean())


def _sample(
    sigma: float, rows: int = 400, horizon: int = 12, seed: int = 3
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    forecast = rng.uniform(100.0, 500.0, (rows, horizon))
    return forecast, forecast * np.exp(rng.normal(0.0, sigma, (rows, horizon)))


def test_scale_minimises_each_bucket_s_mape() -> None:
    """Test that no factor on a fine grid gives a bucket a lower MAPE than the fitted one."""
    forecast, actual = _sample(0.2)
    scale = mape_scale(forecast, actual, np.ones_like(forecast))
    for lo, hi in BUCKETS:
        if lo > forecast.shape[1]:
            break
        cols = slice(lo - 1, min(hi, forecast.shape[1]))
        assert np.ptp(scale[cols]) == 0.0  # one factor per bucket
        best = _mape(scale[cols][0] * forecast[:, cols], actual[:, cols])
        grid = np.linspace(0.8, 1.2, 801)
        assert best <= min(_mape(c * forecast[:, cols], actual[:, cols]) for c in grid) + 1e-12


def test_scale_sits_below_the_median_for_log_normal_errors() -> None:
    """Test that unbiased log-normal errors give the factor exp(-sigma^2), below 1 (MAPE
    penalises a forecast above the actual more than one below)."""
    sigma = 0.15
    forecast, actual = _sample(sigma, rows=20_000, horizon=3)
    scale = mape_scale(forecast, actual, np.ones_like(forecast))
    assert scale[0] == pytest.approx(np.exp(-(sigma**2)), abs=0.006)
    assert scale[0] < np.exp(-(sigma**2) / 2)


def test_unobserved_hours_do_not_move_the_scale() -> None:
    """Test that masked (gap-filled) targets are left out, whatever their value."""
    forecast, actual = _sample(0.1)
    mask = np.ones_like(forecast)
    mask[::3] = 0.0
    garbage = actual.copy()
    garbage[::3] *= 50.0
    assert np.array_equal(mape_scale(forecast, actual, mask), mape_scale(forecast, garbage, mask))


def test_scaled_fit_multiplies_the_blend_and_keeps_the_bounds(
    history: CarbonHistory, fitted_rg: CarbonForecaster, fitted_rgc: CarbonForecaster
) -> None:
    """Test that the scaled forecaster's point forecast is the same blend times its factor,
    and that p10/p90 do not move (its residual quantiles are taken around the scaled point)
    wherever the hours pooled for a quantile share one factor."""
    assert fitted_rg.point_scale is None
    assert fitted_rgc.point_scale is not None
    assert np.array_equal(fitted_rgc.weights, fitted_rg.weights)
    grid = to_grid(history)
    origins = np.array([82 * 24, 85 * 24 + 5], dtype=np.int64)
    plain, scaled = fitted_rg.predict(grid, origins), fitted_rgc.predict(grid, origins)
    np.testing.assert_allclose(scaled["chosen"], plain["chosen"] * fitted_rgc.point_scale)
    pool, scale = 2, fitted_rgc.point_scale
    inside = [
        h
        for h in range(len(scale))
        if np.ptp(scale[max(0, h - pool) : min(len(scale), h + pool + 1)]) == 0.0
    ]
    assert len(inside) > len(scale) // 2
    for bound in ("p10", "p90"):
        np.testing.assert_allclose(scaled[bound][:, inside], plain[bound][:, inside], rtol=1e-9)
    assert not np.allclose(fitted_rgc.point_scale, 1.0)
