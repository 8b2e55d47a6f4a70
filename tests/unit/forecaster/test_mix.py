"""Tests of the source-production tier: emission-factor fit and per-fuel mix forecast."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from services.forecaster.baselines import template_plus_level
from services.forecaster.features import to_grid
from services.forecaster.mix import fit_emission_factors, forecast_shares, mix_forecast
from services.forecaster.sources import EIA_FUELS, CarbonHistory, load_eia_csv

FACTORS = {"WND": 11.0, "NG": 490.0, "COL": 820.0, "NUC": 0.0}


def _known_mix(days: int = 60, seed: int = 1, noise: float = 0.0) -> CarbonHistory:
    """Random hourly MW of four fuels, intensity from (1) with :data:`FACTORS` (+ noise)."""
    rng = np.random.default_rng(seed)
    index = pd.date_range("2022-01-01", periods=days * 24, freq="h", tz="UTC")
    hours = np.arange(len(index))
    daily = 1.0 + 0.5 * np.sin(2 * np.pi * (hours % 24) / 24)
    generation = pd.DataFrame(
        {
            "WND": rng.uniform(0, 800, len(index)),
            "NG": 2000 * daily + rng.normal(0, 50, len(index)),
            "COL": rng.uniform(300, 900, len(index)),
            "NUC": np.full(len(index), 1000.0),
        },
        index=index,
    ).clip(lower=0.0)
    total = generation.sum(axis=1)
    intensity = (generation * pd.Series(FACTORS)).sum(axis=1) / total
    intensity = intensity * np.exp(rng.normal(0.0, noise, len(index)))
    return CarbonHistory(
        region="KNOWN",
        intensity=intensity.rename("gco2_per_kwh"),
        fuel_mix=generation.div(total, axis=0),
        signal="average",
        emission_factor="direct",
        source="synthetic",
        generation=generation,
    )


def test_factor_fit_recovers_known_factors_exactly() -> None:
    """Test NNLS of CI x total on the MW against the factors that made the data."""
    fitted = fit_emission_factors(to_grid(_known_mix()))
    assert fitted is not None
    assert fitted.names == tuple(FACTORS)
    np.testing.assert_allclose(fitted.factors, list(FACTORS.values()), atol=1e-6)
    assert fitted.max_abs_error < 1e-6
    assert fitted.rows == 60 * 24


def test_factor_fit_reports_its_error_and_keeps_factors_non_negative() -> None:
    """Test that noisy intensity gives a positive residual and no negative factor."""
    fitted = fit_emission_factors(to_grid(_known_mix(noise=0.05)))
    assert fitted is not None
    assert 1.0 < fitted.mean_abs_error < 50.0
    assert min(fitted.factors) >= 0.0
    np.testing.assert_allclose(fitted.factors[1:3], [490.0, 820.0], rtol=0.1)


def test_factor_fit_reads_only_the_hours_before_its_end() -> None:
    """Test that the fitting span bound is respected (later hours cannot move the factors)."""
    grid = to_grid(_known_mix())
    end = 30 * 24
    clean = fit_emission_factors(grid, end)
    y = grid.y.copy()
    y[end:] *= 3.0
    moved = fit_emission_factors(dataclasses.replace(grid, y=y), end)
    assert clean == moved
    assert fit_emission_factors(dataclasses.replace(grid, y=y)) != clean


def test_factor_fit_needs_generation() -> None:
    """Test that a shares-only history has no factors."""
    assert fit_emission_factors(to_grid(dataclasses.replace(_known_mix(), generation=None))) is None


def test_mix_forecast_is_causal_and_uses_the_last_allowed_hour() -> None:
    """Test that MW from the origin on do not move the forecast and the hour before does."""
    grid = to_grid(_known_mix())
    factors = fit_emission_factors(grid, 40 * 24)
    assert factors is not None
    origins = np.array([45 * 24, 50 * 24 + 5], dtype=np.int64)
    before = mix_forecast(grid, origins, 48, factors)
    generation = grid.generation.copy()
    generation[origins[0] :] *= np.array([5.0, 0.1, 3.0, 0.0])
    after = mix_forecast(dataclasses.replace(grid, generation=generation), origins[:1], 48, factors)
    np.testing.assert_array_equal(after[0], before[0])
    generation[origins[0] - 1, 0] += 5000.0
    moved = mix_forecast(dataclasses.replace(grid, generation=generation), origins[:1], 48, factors)
    assert not np.array_equal(moved[0], before[0])


def test_mix_forecast_is_the_intensity_of_the_per_fuel_template_level() -> None:
    """Test (1) on the per-fuel template + level MW, and that it differs from template +
    level on the intensity itself (the ratio is not linear in the MW)."""
    grid = to_grid(_known_mix())
    factors = fit_emission_factors(grid)
    assert factors is not None
    origins = np.array([40 * 24, 41 * 24 + 3], dtype=np.int64)
    per_fuel = np.stack(
        [
            np.maximum(template_plus_level(grid.generation[:, j], origins, 24), 0.0)
            for j in range(4)
        ],
        axis=2,
    )
    expected = (per_fuel * np.asarray(factors.factors)).sum(axis=2) / per_fuel.sum(axis=2)
    np.testing.assert_allclose(mix_forecast(grid, origins, 24, factors), expected)
    assert not np.allclose(expected, template_plus_level(grid.y, origins, 24))


def test_mix_forecast_refuses_other_fuel_columns() -> None:
    """Test that factors fitted on other fuels are not applied silently."""
    grid = to_grid(_known_mix())
    factors = fit_emission_factors(grid)
    assert factors is not None
    other = dataclasses.replace(factors, names=("A", "B", "C", "D"))
    with pytest.raises(ValueError, match="fuel columns"):
        mix_forecast(grid, np.array([40 * 24], dtype=np.int64), 24, other)


def test_eia_intensity_is_the_mix_with_fixed_factors() -> None:
    """Test the finding recorded in docs/forecaster.md: EIA-930 ``avg_CI`` is (1) with the
    same factors in every balancing authority (fitted on January-July only)."""
    history = load_eia_csv("CISO").until(pd.Timestamp("2022-07-31 23:00", tz="UTC"))
    fitted = fit_emission_factors(to_grid(history))
    assert fitted is not None
    assert fitted.names == EIA_FUELS
    expected = [11.0, 41.0, 24.0, 650.0, 490.0, 820.0, 12.0, 230.0]
    np.testing.assert_allclose(fitted.factors, expected, atol=1e-3)
    assert fitted.max_abs_error < 1e-6


def test_forecast_shares_sum_to_one_and_are_missing_without_generation() -> None:
    """Test the booster's share features: the forecast mix's shares, NaN for a shares-only
    history (pooled Electricity Maps rows), causal like the MW forecasts."""
    history = _known_mix()
    grid = to_grid(history)
    names = tuple(FACTORS)
    origins = np.array([40 * 24, 45 * 24 + 9], dtype=np.int64)
    shares = forecast_shares(grid, origins, 24, names)
    assert shares.shape == (2, 24, 4)
    np.testing.assert_allclose(shares.sum(axis=2), 1.0)
    generation = grid.generation.copy()
    generation[origins[0] :] *= np.array([9.0, 0.5, 2.0, 0.0])
    moved = dataclasses.replace(grid, generation=generation)
    np.testing.assert_array_equal(forecast_shares(moved, origins[:1], 24, names)[0], shares[0])
    generation[origins[0] - 1] *= np.array([9.0, 0.5, 2.0, 0.0])
    moved = dataclasses.replace(grid, generation=generation)
    assert not np.array_equal(forecast_shares(moved, origins[:1], 24, names)[0], shares[0])
    shares_only = to_grid(dataclasses.replace(history, generation=None))
    assert np.isnan(forecast_shares(shares_only, origins, 24, names)).all()
