"""Tests of the carbon-aware-sdk "best window" query."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from greenserve.bench.forecaster.backtest import window_regret
from services.forecaster.models import CarbonForecast
from shared.domain.best_window import best_window, best_window_index, window_means


def _forecast(values: list[float]) -> CarbonForecast:
    return CarbonForecast(
        region="X",
        issued_at=pd.Timestamp("2024-05-01 00:00", tz="UTC"),
        step_s=3600,
        values=tuple(values),
        p10=tuple(values),
        p90=tuple(values),
        signal="average",
        emission_factor="direct",
        model="test",
    )


def test_best_window_finds_the_lowest_mean_stretch() -> None:
    """Test that the 3-hour window over hours 4-6 (mean 20) wins on a hand-made series."""
    values = [100.0, 90.0, 80.0, 70.0, 10.0, 30.0, 20.0, 95.0, 5.0, 200.0]
    start, mean = best_window(_forecast(values), 3)
    assert start == pd.Timestamp("2024-05-01 04:00", tz="UTC")
    assert mean == pytest.approx(20.0)


def test_best_window_prefers_the_earliest_of_equal_windows() -> None:
    """Test that ties go to the earliest start."""
    assert best_window_index([5.0, 1.0, 1.0, 5.0, 1.0, 1.0], 2) == (1, 1.0)


def test_best_window_of_full_length_is_the_overall_mean() -> None:
    """Test that a window as long as the forecast starts at the origin with the mean."""
    values = [3.0, 6.0, 9.0]
    assert best_window(_forecast(values), 3) == (_forecast(values).issued_at, 6.0)


def test_best_window_rejects_windows_that_do_not_fit() -> None:
    """Test that too long or fractional windows raise."""
    with pytest.raises(ValueError, match="does not fit"):
        best_window(_forecast([1.0, 2.0]), 3)
    with pytest.raises(ValueError, match="whole number"):
        best_window(_forecast([1.0, 2.0]), 1.5)


def test_window_regret_is_zero_for_a_perfect_forecast_and_positive_otherwise() -> None:
    """Test that regret compares the chosen window's actual mean with the true best."""
    actual = np.array([[50.0, 40.0, 10.0, 10.0, 60.0]])
    observed = np.ones_like(actual)
    assert window_regret(actual, actual, observed, 2)["regret_pct"] == 0.0
    misled = np.array([[1.0, 1.0, 90.0, 90.0, 90.0]])
    scored = window_regret(misled, actual, observed, 2)
    assert scored["regret_g"] == pytest.approx(35.0)
    assert scored["regret_pct"] == pytest.approx(350.0)
    np.testing.assert_allclose(window_means(actual, 2), [[45.0, 25.0, 10.0, 35.0]])
