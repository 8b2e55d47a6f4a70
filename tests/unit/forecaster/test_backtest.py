"""Tests of the rolling-origin backtest with periodic re-estimation and the pooled-fit memo."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from greenserve.bench.forecaster.backtest import (
    RollingForecasts,
    as_dict,
    code_digest,
    package_digest,
    refit_origins,
    rolling_forecasts,
    run_backtest,
)
from services.forecaster.config import ForecasterConfig
from services.forecaster.features import to_grid
from services.forecaster.models import SharedFits, fit_forecaster
from services.forecaster.sources import CarbonHistory, with_unknown_shares
from tests.unit.forecaster.conftest import synthetic_history

CONFIG = ForecasterConfig(
    horizon_h=24, max_training_rows=6_000, hw_fit_days=14, booster_max_iter=20
)
DAYS = 120
TRAIN_DAYS = 80
REFIT_DAYS = 15


def _perturbed_after(history: CarbonHistory, cutoff: pd.Timestamp) -> CarbonHistory:
    """Return the history with every value after ``cutoff`` doubled and the first fuel's
    generation tripled there (a fake future)."""
    values = history.intensity.copy()
    values[values.index > cutoff] *= 2.0
    assert history.generation is not None
    generation = history.generation.copy()
    generation.loc[generation.index > cutoff, generation.columns[0]] *= 3.0
    return dataclasses.replace(history, intensity=values, generation=generation)


@pytest.fixture(scope="module")
def long_history() -> CarbonHistory:
    """A synthetic region long enough for a training span and three refits."""
    return synthetic_history(days=DAYS)


def _train_end(history: CarbonHistory) -> pd.Timestamp:
    return pd.Timestamp(history.intensity.index[TRAIN_DAYS * 24 - 1])


@pytest.fixture(scope="module")
def clean(long_history: CarbonHistory) -> RollingForecasts:
    """The rolling forecasts of the unperturbed history, refitted every REFIT_DAYS."""
    return rolling_forecasts(
        long_history, _train_end(long_history), config=CONFIG, refit_days=REFIT_DAYS
    )


def test_refit_origins_step_by_the_cadence_and_stay_in_the_test_span() -> None:
    """Test that refits start at the first origin, every N days, none after the last origin."""
    first = pd.Timestamp("2022-08-01", tz="UTC")
    last = pd.Timestamp("2022-12-30", tz="UTC")
    starts = refit_origins(first, last, 30)
    assert starts[0] == first
    assert all(b - a == pd.Timedelta(days=30) for a, b in itertools.pairwise(starts))
    assert starts[-1] <= last < starts[-1] + pd.Timedelta(days=30)
    assert refit_origins(first, last, None) == [first]
    assert refit_origins(first, last, 0) == [first]
    with pytest.raises(ValueError, match="refit_days"):
        refit_origins(first, last, -1)


def test_each_origin_uses_the_latest_fit_made_before_it(
    long_history: CarbonHistory, clean: RollingForecasts
) -> None:
    """Test the block structure: fit k forecasts the origins in [refit k, refit k+1)."""
    rolling = clean
    grid = to_grid(long_history)
    starts = [grid.index_of(start) for start, _ in rolling.fits]
    assert starts == [(TRAIN_DAYS + k * REFIT_DAYS) * 24 for k in range(len(starts))]
    assert len(starts) == 3
    for origin, k in zip(rolling.origins, rolling.fit_of_origin, strict=True):
        assert starts[k] <= origin
        assert k == len(starts) - 1 or origin < starts[k + 1]
    # A refit learns from more data, so it is another model than the first fit.
    first, last = rolling.fits[0][1], rolling.fits[-1][1]
    assert not np.array_equal(first.weights, last.weights) or first.hw_params != last.hw_params


def test_refits_never_read_data_from_their_origin_on(
    long_history: CarbonHistory, clean: RollingForecasts
) -> None:
    """Test no look-ahead across refits: a changed future moves no earlier forecast.

    The data from the second refit origin on is doubled: every forecast whose origin lies
    before that point (made by the first fit) must stay the same bit for bit, and the
    second fit (data until one hour before its origin) must be unchanged too; forecasts
    from the second refit origin on must move, so the test can fail.
    """
    train_end = _train_end(long_history)
    second_refit = clean.fits[1][0]
    leaked = _perturbed_after(long_history, second_refit - pd.Timedelta(hours=1))
    moved = rolling_forecasts(leaked, train_end, config=CONFIG, refit_days=REFIT_DAYS)
    grid = to_grid(long_history)
    before = clean.origins < grid.index_of(second_refit)
    assert before.any()
    assert (~before).any()
    for name, values in clean.predictions.items():
        np.testing.assert_array_equal(moved.predictions[name][before], values[before])
    np.testing.assert_array_equal(moved.fits[1][1].weights, clean.fits[1][1].weights)
    assert not np.allclose(
        moved.predictions["chosen"][~before], clean.predictions["chosen"][~before]
    )
    assert not np.array_equal(moved.fits[2][1].weights, clean.fits[2][1].weights)


def test_backtest_reports_the_fixed_fit_beside_the_refits(
    long_history: CarbonHistory, tmp_path: Path
) -> None:
    """Test that the result carries both protocols and one blend description per fit, and
    that each fit is reported as it ends (fitted, then from the cache on a second run)."""
    train_end = _train_end(long_history)
    seen: list[tuple[int, int, pd.Timestamp, bool]] = []

    def on_fit(number: int, total: int, end: pd.Timestamp, seconds: float, cached: bool) -> None:
        assert seconds >= 0.0
        seen.append((number, total, end, cached))

    refit = run_backtest(
        long_history, train_end, config=CONFIG, refit_days=REFIT_DAYS, cache_dir=tmp_path,
        on_fit=on_fit,
    )  # fmt: skip
    assert [(n, t, c) for n, t, _, c in seen] == [(1, 3, False), (2, 3, False), (3, 3, False)]
    assert seen[0][2] == train_end
    assert [str((end + pd.Timedelta(hours=1)).date()) for *_, end, _ in seen] == list(refit.choice)
    fixed = run_backtest(long_history, train_end, config=CONFIG, cache_dir=tmp_path, on_fit=on_fit)
    assert seen[3] == (1, 1, train_end, True)
    assert refit.refit_days == REFIT_DAYS
    assert fixed.refit_days is None
    assert refit.mape_fixed_fit == fixed.mape == fixed.mape_fixed_fit
    assert refit.mape != fixed.mape
    assert len(refit.choice) == 3
    assert len(fixed.choice) == 1
    assert next(iter(refit.choice)) == next(iter(fixed.choice))


def test_a_shared_memo_fits_the_pool_once_and_changes_no_result(
    long_history: CarbonHistory,
) -> None:
    """Test that pooled members share boosters through the memo with identical forecasts."""
    other = synthetic_history(days=DAYS, seed=11)
    other = dataclasses.replace(other, region="SYN2")
    end = _train_end(long_history)
    one, two = long_history.until(end), other.until(end)
    shared = SharedFits()
    with_memo = [
        fit_forecaster(one, config=CONFIG, related=[two], shared=shared),
        fit_forecaster(two, config=CONFIG, related=[one], shared=shared),
    ]
    assert len(shared.boosters) == 2  # validation and final booster, once for the pool
    assert len(shared.hw) == 2  # one Holt-Winters fit per member
    alone = [
        fit_forecaster(one, config=CONFIG, related=[two]),
        fit_forecaster(two, config=CONFIG, related=[one]),
    ]
    for history, memo_fit, plain_fit in zip((one, two), with_memo, alone, strict=True):
        grid = to_grid(history)
        origins = np.array([len(grid) - 24 * 3], dtype=np.int64)
        np.testing.assert_array_equal(memo_fit.weights, plain_fit.weights)
        np.testing.assert_array_equal(
            memo_fit.predict(grid, origins)["chosen"], plain_fit.predict(grid, origins)["chosen"]
        )


def test_a_history_with_unknown_shares_joins_the_pool_as_extra_rows(
    long_history: CarbonHistory,
) -> None:
    """Test that another source's history (no fuel shares) pools into the booster's rows.

    Its share features are missing values: the fit must accept it, forecast finite values
    for the region, and differ from the fit without those rows (so they were used).
    """
    assert long_history.fuel_mix is not None
    other = synthetic_history(days=DAYS, seed=5)
    extra = with_unknown_shares(other, list(long_history.fuel_mix.columns))
    assert extra.fuel_mix is not None
    assert extra.fuel_mix.isna().all().all()
    assert extra.generation is None
    end = _train_end(long_history)
    own = long_history.until(end)
    pooled = fit_forecaster(own, config=CONFIG, related=[extra.until(end)])
    alone = fit_forecaster(own, config=CONFIG)
    grid = to_grid(own)
    origins = np.array([len(grid) - 24 * 3], dtype=np.int64)
    with_rows = pooled.predict(grid, origins)["gbm"]
    assert np.isfinite(with_rows).all()
    assert not np.array_equal(with_rows, alone.predict(grid, origins)["gbm"])


def test_the_horizon_curve_and_the_day_ahead_series_agree_with_the_scores(
    long_history: CarbonHistory,
) -> None:
    """Test that the bucket MAPEs are means of the per-horizon curve, and that the day-ahead
    series tiles the test span hour by hour with the history's actuals and a forecast
    inside its own band."""
    result = run_backtest(long_history, _train_end(long_history), config=CONFIG)
    for model, curve in result.mape_by_horizon.items():
        assert len(curve) == CONFIG.horizon_h
        assert np.mean(curve[:6]) == pytest.approx(result.mape[model]["1-6h"], abs=2e-3)
        assert np.mean(curve[:24]) == pytest.approx(result.mape[model]["day1"], abs=2e-3)
    series = result.day_ahead
    assert len(series.times) == result.n_origins * 24
    assert (np.diff(series.times) == pd.Timedelta(hours=1)).all()  # daily origins: no gap
    assert series.times[0] == _train_end(long_history) + pd.Timedelta(hours=1)
    assert series.actual == pytest.approx(long_history.intensity.loc[series.times].to_numpy())
    low, mid, high = (series.forecasts[m] for m in ("p10", "chosen", "p90"))
    assert ((low <= mid) & (mid <= high)).all()
    assert "mape_pct_by_horizon" in as_dict(result)


def test_the_cache_key_changes_with_any_module_of_the_package(tmp_path: Path) -> None:
    """Test that an edit to a module split out of the old fixed list (``booster_rows``)
    changes the digest, as does a new module, and that the digest is stable otherwise; and
    that the cache key's digest is that of the forecaster package and of the backtest's own
    folder as imported, whatever happens on disk."""
    package = Path(inspect.getfile(fit_forecaster)).parent
    backtest = Path(inspect.getfile(code_digest)).parent
    for module in package.glob("*.py"):
        (tmp_path / module.name).write_bytes(module.read_bytes())
    before = package_digest(tmp_path)
    assert package_digest(tmp_path) == before
    assert package_digest(package) == before
    assert code_digest() == before + package_digest(backtest)
    rows = tmp_path / "booster_rows.py"
    rows.write_bytes(rows.read_bytes() + b"\n# edited\n")
    edited = package_digest(tmp_path)
    assert edited != before
    (tmp_path / "new_module.py").write_text("X = 1\n")
    assert package_digest(tmp_path) != edited
    assert code_digest() == before + package_digest(backtest)


def test_reporting_errors_are_left_out_of_the_plausible_scores_only(
    long_history: CarbonHistory, tmp_path: Path
) -> None:
    """Test the session-10 scoring rule: one corrupt actual in the test span (a fifth of
    the true intensity, as PJM's 270 MW hours) charges every model in ``mape``; named as
    unscored, it is left out of the plausible scores and listed once, while the forecasts
    and the raw scores stay those of the run that named nothing. Unscored hours outside
    the scored targets are not listed."""
    train_end = _train_end(long_history)
    bad = train_end + pd.Timedelta(days=10, hours=6)
    intensity = long_history.intensity.copy()
    intensity[intensity.index == bad] *= 0.2
    corrupt = dataclasses.replace(long_history, intensity=intensity)
    named = pd.DatetimeIndex([train_end - pd.Timedelta(days=3), bad])
    run = {
        "raw": run_backtest(corrupt, train_end, config=CONFIG, cache_dir=tmp_path),
        "named": run_backtest(corrupt, train_end, config=CONFIG, cache_dir=tmp_path,
                              unscored=named),
        "clean": run_backtest(long_history, train_end, config=CONFIG, cache_dir=tmp_path,
                              unscored=pd.DatetimeIndex([])),
    }  # fmt: skip
    named_scores, clean_scores = run["named"].plausible, run["clean"].plausible
    assert run["raw"].plausible is None
    assert named_scores is not None
    assert clean_scores is not None
    assert named_scores.unscored_hours == (bad,)
    assert run["named"].mape == run["raw"].mape
    for model in ("chosen", "template_level", "same_hour_yesterday"):
        assert named_scores.mape[model]["day1"] < run["raw"].mape[model]["day1"] - 0.2, model
    assert clean_scores.unscored_hours == ()
    assert clean_scores.mape == run["clean"].mape
    assert clean_scores.window_regret == run["clean"].window_regret
    report = as_dict(run["named"])
    assert report["unscored_hours"] == [str(bad)]
    assert report["mape_pct_plausible_actuals"] == named_scores.mape
    assert "mape_pct_plausible_actuals" not in as_dict(run["raw"])
