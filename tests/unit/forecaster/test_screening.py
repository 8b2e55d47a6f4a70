"""Screening EIA reporting errors: implausible total generation becomes a gap."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from greenserve.bench.forecaster.screening import implausible_hours, screened
from services.forecaster.features import to_grid
from services.forecaster.sources import load_eia_csv
from tests.unit.forecaster.conftest import synthetic_history


def test_a_collapse_or_a_spike_of_total_generation_is_flagged_from_past_hours_only() -> None:
    """Test a 4-hour collapse and a 1-hour spike against a steady diurnal total, and that
    changing a later hour never changes the verdict on an earlier one (causal)."""
    index = pd.date_range("2022-01-01", periods=24 * 6, freq="h", tz="UTC")
    total = 1000.0 + 300.0 * np.sin(np.arange(len(index)) * 2 * np.pi / 24)
    frame = pd.DataFrame({"NG": total * 0.6, "NUC": total * 0.4}, index=index)
    frame.iloc[80:84] = [[21.0, 0.0]] * 4
    frame.iloc[100] = frame.iloc[100] * 3.0
    flags = implausible_hours(frame)
    assert list(np.flatnonzero(flags.to_numpy())) == [80, 81, 82, 83, 100]
    later = frame.copy()
    later.iloc[120:] = 1.0
    assert (implausible_hours(later)[:120] == flags[:120]).all()
    # The first hours have no trailing window yet: never judged.
    assert not flags[:12].any()


def test_a_screened_hour_is_a_gap_neither_trained_on_nor_scored() -> None:
    """Test that the hour's intensity, shares and MW become NaN and the grid marks it
    unobserved (forward-filled), on the synthetic history with one broken hour."""
    history = synthetic_history(days=20)
    assert history.generation is not None
    broken_at = history.generation.index[300]
    generation = history.generation.copy()
    generation.loc[broken_at] = 0.5
    clean, hours = screened(dataclasses.replace(history, generation=generation))
    assert list(hours) == [broken_at]
    assert np.isnan(clean.intensity.loc[broken_at])
    assert clean.generation is not None
    assert clean.generation.loc[broken_at].isna().all()
    grid = to_grid(clean)
    at = grid.index_of(broken_at)
    assert not grid.observed[at]
    assert grid.y[at] == grid.y[at - 1]


def test_the_pjm_reporting_errors_of_october_2022_are_found() -> None:
    """Test the shared data's known case: PJM's five hours of ≈ 270 MW in all."""
    _, hours = screened(load_eia_csv("PJM"))
    expected = ["2022-10-01 05:00", "2022-10-01 06:00", "2022-10-01 07:00", "2022-10-01 08:00",
                "2022-10-02 04:00"]  # fmt: skip
    assert list(hours) == [pd.Timestamp(t, tz="UTC") for t in expected]
    _, none = screened(load_eia_csv("CISO"))
    assert not len(none)
