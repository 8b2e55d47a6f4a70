"""Tests that the CSV loaders parse the real reference files."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd

from services.forecaster.features import to_grid
from services.forecaster.sources import CarbonSource, CsvCarbonSource, load_eia_csv, load_em_csv


def test_eia_loader_returns_a_full_hourly_year_with_fuel_shares() -> None:
    """Test that CISO 2022 is 8760 hourly UTC points with shares summing to one."""
    history = load_eia_csv("CISO")
    index = pd.DatetimeIndex(history.intensity.index)
    assert len(index) == 8760
    assert str(index.tz) == "UTC"
    assert (index.to_series().diff().dropna() == pd.Timedelta(hours=1)).all()
    assert history.fuel_mix is not None
    assert "SUN" in history.fuel_mix.columns
    totals = history.fuel_mix.sum(axis=1, min_count=1).dropna()
    np.testing.assert_allclose(totals, 1.0, atol=1e-9)
    assert 50 < history.intensity.mean() < 500
    # The fixed per-fuel factors behind avg_CI are life-cycle medians (test_mix pins them).
    assert (history.signal, history.emission_factor) == ("average", "lifecycle")


def test_em_loader_concatenates_years_across_a_leap_year() -> None:
    """Test that GB 2023 + 2024 join into one gap-free series of 8760 + 8784 hours."""
    history = load_em_csv("GB", years=(2024, 2023))
    assert len(history.intensity) == 8760 + 8784
    assert history.intensity.index[0] == pd.Timestamp("2023-01-01", tz="UTC")
    assert history.intensity.notna().all()
    assert history.fuel_mix is not None
    assert history.fuel_mix["low_carbon"].between(0, 1).all()
    lifecycle = load_em_csv("GB", years=(2024,), emission_factor="lifecycle")
    assert lifecycle.intensity.mean() > history.intensity.loc["2024"].mean()


def test_grid_fills_gaps_forward_only() -> None:
    """Test that PJM's missing hours take the last value before the gap, never a later one."""
    history = load_eia_csv("PJM")
    grid = to_grid(history)
    gap = np.flatnonzero(~grid.observed)
    assert gap.size > 0
    first = int(gap[0])
    assert grid.y[first] == grid.y[first - 1]


async def test_csv_source_serves_a_time_slice_through_the_protocol() -> None:
    """Test that the CSV source satisfies CarbonSource and slices [start, end]."""
    source = CsvCarbonSource("NYIS")
    assert isinstance(source, CarbonSource)
    sliced = await source.history(
        datetime(2022, 3, 1, tzinfo=UTC), datetime(2022, 3, 2, tzinfo=UTC)
    )
    assert len(sliced.intensity) == 25
