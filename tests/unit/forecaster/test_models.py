"""Tests of the fitted carbon forecaster: labels, bounds and the no-look-ahead guard."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from services.forecaster.features import to_grid
from services.forecaster.models import CarbonForecaster, ForecasterConfig, fit_forecaster
from services.forecaster.sources import CarbonHistory


def _perturbed_after(history: CarbonHistory, cutoff: pd.Timestamp) -> CarbonHistory:
    """Return the history with every value after ``cutoff`` tripled (a fake future)."""
    values = history.intensity.copy()
    values[values.index > cutoff] *= 3.0
    mix = history.fuel_mix.copy() if history.fuel_mix is not None else None
    if mix is not None:
        mix[mix.index > cutoff] = 0.5
    return CarbonHistory(
        region=history.region,
        intensity=values,
        fuel_mix=mix,
        signal=history.signal,
        emission_factor=history.emission_factor,
        source=history.source,
    )


def test_forecast_ignores_everything_after_one_hour_before_origin(
    history: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test that changing data at or after the origin leaves the forecast unchanged."""
    origin = history.intensity.index[85 * 24]
    leaked = _perturbed_after(history, origin - pd.Timedelta(hours=1))
    clean = fitted.forecast(history, origin, horizon_h=24)
    assert fitted.forecast(leaked, origin, horizon_h=24) == clean
    assert fitted.forecast(history.until(origin - pd.Timedelta(hours=1)), origin) == clean


def test_forecast_uses_the_hour_just_before_origin(
    history: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test that the newest allowed input (origin - 1 h) does move the forecast."""
    origin = history.intensity.index[85 * 24]
    moved = _perturbed_after(history, origin - pd.Timedelta(hours=2))
    assert fitted.forecast(moved, origin).values != fitted.forecast(history, origin).values


def test_batch_predict_is_causal_for_every_model(
    history: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test that each model's batch forecast at an origin ignores values from the origin on."""
    grid = to_grid(history)
    origins = np.array([82 * 24, 84 * 24 + 7], dtype=np.int64)
    before = fitted.predict(grid, origins)
    future = grid.y.copy()
    future[origins[0] :] *= 5.0
    shares = grid.shares.copy()
    shares[origins[0] :] = 0.0
    leaked = type(grid)(grid.start, future, grid.observed, shares, grid.share_names)
    after = fitted.predict(leaked, origins[:1])
    for name, values in before.items():
        np.testing.assert_array_equal(after[name][0], values[0], err_msg=name)


def test_forecast_is_labelled_and_bounded(history: CarbonHistory, fitted: CarbonForecaster) -> None:
    """Test that a forecast carries its labels, 24 hourly steps and p10 <= p90."""
    origin = history.intensity.index[86 * 24 + 5]
    forecast = fitted.forecast(history, origin)
    assert forecast.issued_at == origin
    assert (forecast.step_s, len(forecast.values)) == (3600, 24)
    assert (forecast.signal, forecast.emission_factor) == ("average", "direct")
    assert forecast.model.startswith("1-6h:")
    assert all(lo <= hi for lo, hi in zip(forecast.p10, forecast.p90, strict=True))
    assert forecast.times()[-1] == origin + pd.Timedelta(hours=23)


def test_fitted_forecaster_beats_seasonal_naive_on_synthetic_days(
    history: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test that the chosen model's day-1 error is below same-hour-yesterday's."""
    grid = to_grid(history)
    origins = np.arange(81 * 24, 88 * 24, 24, dtype=np.int64)
    predicted = fitted.predict(grid, origins, 24)
    actual = grid.y[origins[:, None] + np.arange(24)[None, :]]

    def mape(name: str) -> float:
        return float(np.mean(np.abs(predicted[name] - actual) / actual))

    assert mape("chosen") < mape("same_hour_yesterday")


def test_fit_refuses_related_regions_with_other_fuel_columns(history: CarbonHistory) -> None:
    """Test that pooling a region whose fuel-mix columns differ is refused."""
    assert history.fuel_mix is not None
    other = CarbonHistory(
        region="OTHER",
        intensity=history.intensity,
        fuel_mix=history.fuel_mix.rename(columns={"SUN": "WND"}),
        signal="average",
        emission_factor="direct",
        source="synthetic",
    )
    with pytest.raises(ValueError, match="other fuel-mix columns"):
        fit_forecaster(history, config=ForecasterConfig(hw_fit_days=14), related=[other])
