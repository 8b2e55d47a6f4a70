"""Rolling-origin backtest of the carbon forecaster, with daily origins and no look-ahead.

The forecaster is fitted on everything up to ``train_end`` (its own validation split lies
inside that span), then issues a forecast at every daily origin of the test span from the
data that ends one hour before that origin. With ``refit_days`` the backtest is an
expanding-window rolling origin with periodic re-estimation: every ``refit_days`` days
inside the test span the forecaster is fitted again, exactly as at the start, on all data
before that refit origin (blend weights and quantiles from the validation span inside
it), and forecasts the following origins. Fitted models are cached on disk, keyed by the
region, the split, the config, the data file and the forecaster's source code, so a re-run
only re-scores. Scores: MAPE per horizon bucket per model, p10-p90 coverage, and the regret
of the 4-hour "best window" chosen on the forecast.

Modules: the rolling-origin loop is :mod:`.rolling_origin`, the fit cache
:mod:`.backtest_cache`, the scores :mod:`.backtest_scores` and the result and its JSON
:mod:`.backtest_report`; this module runs them for one region and re-exports their names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from greenserve.bench.forecaster.backtest_cache import code_digest, fit_cached, package_digest
from greenserve.bench.forecaster.backtest_report import BacktestResult, PlausibleScores, as_dict
from greenserve.bench.forecaster.backtest_scores import (
    CURVE_MODELS,
    REPORT_BUCKETS,
    REPORTED_MODELS,
    band_scores,
    score_forecasts,
    window_regret,
)
from greenserve.bench.forecaster.day_ahead import day_ahead_series
from greenserve.bench.forecaster.rolling_origin import (
    FitProgress,
    RollingForecasts,
    daily_origins,
    refit_origins,
    rolling_forecasts,
)
from services.forecaster.bands import RECENT_DAYS, rolling_bands
from services.forecaster.blend import mape_by_horizon
from services.forecaster.config import ForecasterConfig
from services.forecaster.features import to_grid
from services.forecaster.models import SharedFits
from services.forecaster.sources import CarbonHistory

__all__ = [
    "CURVE_MODELS",
    "REPORTED_MODELS",
    "REPORT_BUCKETS",
    "BacktestResult",
    "PlausibleScores",
    "RollingForecasts",
    "as_dict",
    "code_digest",
    "daily_origins",
    "fit_cached",
    "package_digest",
    "refit_origins",
    "rolling_forecasts",
    "run_backtest",
    "window_regret",
]


def run_backtest(
    history: CarbonHistory,
    train_end: pd.Timestamp,
    *,
    config: ForecasterConfig | None = None,
    refit_days: int | None = None,
    max_origins: int | None = None,
    window_h: int = 4,
    cache_dir: Path | None = None,
    related: Sequence[CarbonHistory] = (),
    shared: SharedFits | None = None,
    on_fit: FitProgress | None = None,
    unscored: pd.DatetimeIndex | None = None,
) -> BacktestResult:
    """Fit on ``history`` up to ``train_end`` (and refit every ``refit_days``), score daily origins.

    Args:
        history: the region's full history (train and test).
        train_end: last timestamp the first fit may learn from.
        config: forecaster settings.
        refit_days: days between re-estimations inside the test span (see
            :func:`rolling_forecasts`); ``None`` fits once on the training span.
        max_origins: score at most this many origins, evenly spaced over the test span.
        window_h: length of the best-window query scored.
        cache_dir: where fitted models are cached; ``None`` disables the cache.
        related: other regions pooled into the boosted model's training rows; cut at each
            fit's end like the region itself.
        shared: memo shared by the fits of one pool's members (saves time only).
        on_fit: progress callback after each fit (see :data:`FitProgress`).
        unscored: hours judged reporting errors: the same forecasts are scored a second
            time without them as targets (:attr:`BacktestResult.plausible`); the models
            still see them as inputs.
    """
    cfg = config if config is not None else ForecasterConfig()
    rolling = rolling_forecasts(
        history,
        train_end,
        config=cfg,
        refit_days=refit_days,
        max_origins=max_origins,
        cache_dir=cache_dir,
        related=related,
        shared=shared,
        on_fit=on_fit,
    )
    grid = to_grid(history)
    origins, predictions = rolling.origins, rolling.predictions
    targets = origins[:, None] + np.arange(cfg.horizon_h)[None, :]
    actual, mask = grid.y[targets], grid.observed[targets].astype(np.float64)
    recent_p10, recent_p90, recent_rows = rolling_bands(
        origins,
        predictions["chosen"],
        actual,
        mask,
        (predictions["p10"], predictions["p90"]),
        days=cfg.recent_band_days or RECENT_DAYS,
        pool_h=cfg.quantile_pool_h,
    )
    bands = {
        "validation": band_scores(predictions["p10"], predictions["p90"], actual, mask),
        "recent": band_scores(recent_p10, recent_p90, actual, mask),
    }
    bands["recent"]["origins_with_recent_band"] = float(recent_rows.sum())
    if cfg.recent_band_days:
        predictions = {**predictions, "p10": recent_p10, "p90": recent_p90}
    fixed = rolling.fits[0][1].predict(grid, origins) if len(rolling.fits) > 1 else None
    mape, mape_fixed, regret = score_forecasts(
        predictions, fixed, actual, mask, cfg.horizon_h, window_h
    )
    by_horizon = {
        model: [round(float(v), 3) for v in mape_by_horizon(predictions[model], actual, mask)]
        for model in CURVE_MODELS
    }
    plausible = None
    if unscored is not None:
        flagged = grid.times().isin(unscored)[targets]
        keep = mask * ~flagged
        scores = score_forecasts(predictions, fixed, actual, keep, cfg.horizon_h, window_h)
        hit = np.unique(targets[flagged & (mask > 0)])
        plausible = PlausibleScores(
            unscored_hours=tuple(grid.start + pd.Timedelta(hours=int(i)) for i in hit),
            mape=scores[0],
            mape_fixed_fit=scores[1],
            window_regret=scores[2],
        )
    return BacktestResult(
        region=history.region,
        n_origins=len(origins),
        refit_days=refit_days or None,
        mape=mape,
        mape_fixed_fit=mape_fixed,
        coverage_p10_p90=bands["recent" if cfg.recent_band_days else "validation"]["coverage"],
        bands=bands,
        window_regret=regret,
        choice={str(start.date()): fit.describe_choice() for start, fit in rolling.fits},
        validation_mape={str(start.date()): fit.validation_mape for start, fit in rolling.fits},
        mape_by_horizon=by_horizon,
        day_ahead=day_ahead_series(grid, origins, predictions),
        plausible=plausible,
    )
