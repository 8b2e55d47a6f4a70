"""The forecaster bench's plots: a horizon curve per region set and a day-ahead view per region."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from greenserve.bench.forecaster.backtest import BacktestResult, run_backtest
from greenserve.bench.forecaster.day_ahead import DayAheadSeries
from greenserve.bench.forecaster.plots import DAY_AHEAD_DAYS, plot_backtest, plot_day_ahead
from services.forecaster.config import ForecasterConfig
from tests.unit.forecaster.conftest import synthetic_history

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def result() -> BacktestResult:
    history = synthetic_history(days=110)
    config = ForecasterConfig(
        horizon_h=48, max_training_rows=4_000, hw_fit_days=14, booster_max_iter=10
    )
    train_end = pd.Timestamp(history.intensity.index[85 * 24 - 1])
    return run_backtest(history, train_end, config=config)


def test_the_bench_writes_a_horizon_curve_and_one_day_ahead_plot_per_region(
    result: BacktestResult, tmp_path: Path
) -> None:
    """Test the files for two region sets: each a PNG, named after its region."""
    paths = plot_backtest({"eia:AZPS": result, "em:GB": result}, tmp_path / "plots")
    assert [p.name for p in paths] == [
        "forecaster_mape_by_horizon.png",
        "forecaster_mape_by_horizon_regions.png",
        "forecaster_band_coverage.png",
        "day_ahead_eia_AZPS.png",
        "day_ahead_em_GB.png",
    ]
    for path in paths:
        assert path.read_bytes().startswith(PNG)
        assert path.stat().st_size > 10_000  # drawn, not an empty canvas


def test_a_day_ahead_plot_shows_the_last_weeks_and_survives_skipped_origins(
    result: BacktestResult, tmp_path: Path
) -> None:
    """Test a series with every other origin left out (``--max-origins``) and a gap."""
    series = result.day_ahead
    keep = (np.arange(len(series.times)) // 24) % 2 == 0
    thinned = DayAheadSeries(
        times=series.times[keep],
        actual=np.where(np.arange(keep.sum()) == 5, np.nan, series.actual[keep]),
        forecasts={m: v[keep] for m, v in series.forecasts.items()},
    )
    path = plot_day_ahead("eia:AZPS", thinned, tmp_path / "thin.png", days=DAY_AHEAD_DAYS)
    assert path.read_bytes().startswith(PNG)
    assert dataclasses.is_dataclass(thinned)
