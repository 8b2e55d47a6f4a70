"""The sun's path for the booster (docs/forecaster.md, *The sun's path*; ``solar_features``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from services.forecaster.baselines import seven_day_template
from services.forecaster.features import gbm_features, to_grid
from services.forecaster.sun import clear_sky_hours, sin_elevation
from tests.unit.forecaster.conftest import fit_80_days, synthetic_history

PHOENIX = (33.45, -112.07)


def _peak_elevation_deg(day: str, latitude: float, longitude: float) -> float:
    minutes = pd.date_range(day, periods=24 * 60, freq="min", tz="UTC")
    return float(np.degrees(np.arcsin(sin_elevation(minutes, latitude, longitude).max())))


@pytest.mark.parametrize(
    ("day", "expected"),
    # Noon elevation = 90° - latitude + declination (+23.44° at the June solstice, -23.44° in
    # December, 0 at the equinox).
    [("2022-06-21", 90 - 33.45 + 23.44), ("2022-12-21", 90 - 33.45 - 23.44), ("2022-03-20", 56.55)],
)
def test_the_noon_sun_stands_where_the_declination_puts_it(day: str, expected: float) -> None:
    """Test the peak elevation over Phoenix at the solstices and an equinox (±0.5°)."""
    assert _peak_elevation_deg(day, *PHOENIX) == pytest.approx(expected, abs=0.5)


def test_solar_noon_follows_the_longitude_and_the_equation_of_time() -> None:
    """Test that the sun peaks over Phoenix at 12:00 + 4 min per degree west, shifted by the
    equation of time (early November: the sun is ≈ 16 minutes early)."""
    minutes = pd.date_range("2022-11-03", periods=24 * 60, freq="min", tz="UTC")
    peak = minutes[int(np.argmax(sin_elevation(minutes, *PHOENIX)))]
    expected = pd.Timestamp("2022-11-03 12:00", tz="UTC") + pd.Timedelta(minutes=4 * 112.07 - 16.4)
    assert abs((peak - expected).total_seconds()) <= 90


def test_days_shorten_in_autumn_and_a_region_without_a_point_has_no_sun() -> None:
    """Test that daylight hours at the Columbia basin fall from September to October and
    that the proxy is zero at night and for an unknown region."""
    sept = clear_sky_hours("BPAT", pd.Timestamp("2022-09-01", tz="UTC"), 24)
    octo = clear_sky_hours("BPAT", pd.Timestamp("2022-10-15", tz="UTC"), 24)
    assert (sept > 0).sum() > (octo > 0).sum()
    assert sept.sum() > octo.sum()
    assert ((sept >= 0) & (sept <= 1)).all()
    assert (sept == 0).any()
    assert not clear_sky_hours("XX", pd.Timestamp("2022-09-01", tz="UTC"), 24).any()


def test_solar_columns_are_the_targets_sun_against_the_hours_the_baselines_read() -> None:
    """Test both columns against the clear-sky series itself, at origins inside the grid
    and at its end (targets after the history)."""
    base = synthetic_history(days=50)
    index = pd.date_range("2022-08-01", periods=len(base.intensity), freq="h", tz="UTC")
    history = dataclasses.replace(
        base,
        region="CISO",
        intensity=base.intensity.set_axis(index),
        fuel_mix=None,
        generation=None,
    )
    grid = to_grid(history)
    origins = np.array([grid.index_of(pd.Timestamp("2022-09-10 06:00", tz="UTC")), len(grid)])
    template = seven_day_template(grid.y, origins, 48)
    features, names = gbm_features(grid, origins, 48, template, {}, solar=True)
    rows = features.reshape(len(origins), 48, -1)
    sun = clear_sky_hours("CISO", grid.start, len(grid) + 48)
    for i, origin in enumerate(origins):
        for h in (1, 12, 30):
            t = origin + h - 1
            k = -(-h // 24)
            yesterday = t - 24 * k
            template_hours = [yesterday - 24 * j for j in range(7)]
            assert rows[i, h - 1, names.index("sun_vs_same_hour")] == pytest.approx(
                sun[t] - sun[yesterday]
            )
            assert rows[i, h - 1, names.index("sun_vs_template")] == pytest.approx(
                sun[t] - sun[template_hours].mean()
            )
    # In September the sun is lower each day: at a daylight target the template's sun is
    # higher, somewhere the difference is negative, and it is never large.
    column = rows[:, :, names.index("sun_vs_template")]
    assert column.min() < 0
    assert np.abs(column).max() < 0.2
    without, _ = gbm_features(grid, origins, 48, template, {})
    assert features.shape[1] == without.shape[1] + 2


def test_a_forecaster_with_the_sun_fits_and_forecasts() -> None:
    """Test that the option reaches the fitted forecaster and its forecasts are finite."""
    history = dataclasses.replace(synthetic_history(), region="CISO")
    fitted = fit_80_days(history, booster_bag=1, solar_features=True)
    assert fitted.solar_features
    forecast = fitted.forecast(history, pd.Timestamp("2023-03-21 00:00", tz="UTC"), horizon_h=24)
    assert len(forecast.values) == 24
    assert all(np.isfinite(forecast.values))
