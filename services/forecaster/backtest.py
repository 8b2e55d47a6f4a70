"""Rolling-origin backtest of the carbon forecaster, with daily origins and no look-ahead.

The forecaster is fitted on everything up to ``train_end`` (its own validation split lies
inside that span), then issues a forecast at every daily origin of the test span from the
data that ends one hour before that origin. Fitted models are cached on disk, keyed by the
region, the split, the config, the data file and the forecaster's source code, so a re-run
only re-scores. Scores: MAPE per horizon bucket per model, p10-p90 coverage, and the regret
of the 4-hour "best window" chosen on the forecast.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from services.forecaster.best_window import window_means
from services.forecaster.features import HourlyGrid, to_grid
from services.forecaster.models import (
    BUCKETS,
    CarbonForecaster,
    ForecasterConfig,
    fit_forecaster,
    mape_by_horizon,
)
from services.forecaster.sources import CarbonHistory

__all__ = [
    "REPORTED_MODELS",
    "REPORT_BUCKETS",
    "BacktestResult",
    "as_dict",
    "daily_origins",
    "fit_cached",
    "run_backtest",
    "window_regret",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

REPORT_BUCKETS: Final = {"1-6h": (1, 6), "day1": (1, 24), "day2": (25, 48)}
"""Reported horizon buckets (hours, inclusive); day 1 is CarbonCast's day-ahead MAPE."""
REPORTED_MODELS: Final = ("chosen", "template_level", "same_hour_yesterday", "hw", "gbm")
"""Models scored in the report, the chosen one first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BacktestResult:
    """Scores of one region's backtest."""

    region: str
    n_origins: int
    mape: dict[str, dict[str, float]]
    """MAPE (%) per model, then per bucket of :data:`REPORT_BUCKETS`."""
    coverage_p10_p90: float
    """Share of test hours whose actual lies within [p10, p90] (nominal 0.8)."""
    window_regret: dict[str, dict[str, float]]
    """Per model: best-window regret and saving versus running at the origin."""
    choice: str
    """The blend weights per horizon bucket."""
    validation_mape: dict[str, list[float]]
    """MAPE (%) on the fit's own validation span (inside the training data) per candidate
    and ``"chosen"``, per bucket of :data:`services.forecaster.models.BUCKETS`."""


def daily_origins(grid: HourlyGrid, test_start: pd.Timestamp, horizon_h: int) -> IntArray:
    """Return origins at 00:00 UTC from ``test_start`` while ``horizon_h`` hours still fit."""
    hours = np.arange(len(grid), dtype=np.int64)
    first = grid.index_of(test_start)
    midnight = (hours + grid.start.hour) % 24 == 0
    keep = midnight & (hours >= first) & (hours + horizon_h <= len(grid))
    result: IntArray = hours[keep]
    return result


def window_regret(
    forecast: FloatArray, actual: FloatArray, observed: FloatArray, window_h: int
) -> dict[str, float]:
    """Score the best window chosen on ``forecast`` against the actual best (rows = origins).

    Returns:
        ``regret_pct``: mean % by which the chosen window's actual mean exceeds the best
        window's; ``regret_g``: the same in gCO2/kWh; ``saving_vs_now_pct``: mean % the chosen
        window saves against starting at the origin; ``origins``: rows scored.
    """
    complete = observed.min(axis=1) > 0
    if not complete.any():
        return {
            "regret_pct": float("nan"),
            "regret_g": float("nan"),
            "saving_vs_now_pct": float("nan"),
            "origins": 0.0,
        }
    predicted_means = window_means(forecast[complete], window_h)
    actual_means = window_means(actual[complete], window_h)
    rows = np.arange(actual_means.shape[0])
    chosen = actual_means[rows, np.argmin(predicted_means, axis=1)]
    best = actual_means.min(axis=1)
    floor = np.maximum(best, 1.0)
    return {
        "regret_pct": round(float(np.mean((chosen - best) / floor) * 100.0), 3),
        "regret_g": round(float(np.mean(chosen - best)), 3),
        "saving_vs_now_pct": round(
            float(np.mean((actual_means[:, 0] - chosen) / np.maximum(actual_means[:, 0], 1.0)))
            * 100.0,
            3,
        ),
        "origins": float(complete.sum()),
    }


def _code_digest() -> str:
    digest = hashlib.sha256()
    for name in ("baselines", "features", "gbm", "models", "sources"):
        digest.update((Path(__file__).parent / f"{name}.py").read_bytes())
    return digest.hexdigest()[:16]


def _fingerprint(history: CarbonHistory) -> tuple[object, ...]:
    return (
        history.region,
        history.source,
        history.emission_factor,
        str(history.intensity.index[-1]),
        len(history.intensity),
        float(np.nansum(history.intensity.to_numpy())),
    )


def fit_cached(
    history: CarbonHistory,
    config: ForecasterConfig,
    cache_dir: Path | None,
    related: Sequence[CarbonHistory] = (),
) -> tuple[CarbonForecaster, bool]:
    """Fit a forecaster (see :func:`fit_forecaster`), or load the one fitted on the same inputs.

    Returns:
        The forecaster and whether it came from the cache.
    """
    key_material = repr(
        (
            _fingerprint(history),
            [_fingerprint(other) for other in related],
            config,
            _code_digest(),
        )
    )
    key = hashlib.sha256(key_material.encode()).hexdigest()[:24]
    path = None if cache_dir is None else cache_dir / f"{history.region}-{key}.pkl"
    if path is not None and path.exists():
        with path.open("rb") as handle:
            cached = pickle.load(handle)  # our own cache files, written below
        if isinstance(cached, CarbonForecaster):
            return cached, True
    forecaster = fit_forecaster(history, config=config, related=related)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as handle:
            pickle.dump(forecaster, handle)
        tmp.replace(path)
    return forecaster, False


def run_backtest(
    history: CarbonHistory,
    train_end: pd.Timestamp,
    *,
    config: ForecasterConfig | None = None,
    max_origins: int | None = None,
    window_h: int = 4,
    cache_dir: Path | None = None,
    related: Sequence[CarbonHistory] = (),
) -> BacktestResult:
    """Fit on ``history`` up to ``train_end`` and score daily origins after it.

    Args:
        history: the region's full history (train and test).
        train_end: last timestamp the forecaster may learn from.
        config: forecaster settings.
        max_origins: score at most this many origins, evenly spaced over the test span.
        window_h: length of the best-window query scored.
        cache_dir: where fitted models are cached; ``None`` disables the cache.
        related: other regions pooled into the boosted model's training rows; cut at
            ``train_end`` like the region itself.
    """
    cfg = config if config is not None else ForecasterConfig()
    pooled = [other.until(train_end) for other in related]
    forecaster, _ = fit_cached(history.until(train_end), cfg, cache_dir, pooled)
    grid = to_grid(history)
    origins = daily_origins(grid, train_end + pd.Timedelta(hours=1), cfg.horizon_h)
    if max_origins is not None and len(origins) > max_origins:
        origins = origins[np.linspace(0, len(origins) - 1, max_origins).round().astype(int)]
    predictions = forecaster.predict(grid, origins)
    targets = origins[:, None] + np.arange(cfg.horizon_h)[None, :]
    actual, mask = grid.y[targets], grid.observed[targets].astype(np.float64)
    mape: dict[str, dict[str, float]] = {}
    regret: dict[str, dict[str, float]] = {}
    day = slice(0, min(24, cfg.horizon_h))
    for model in REPORTED_MODELS:
        per_h = mape_by_horizon(predictions[model], actual, mask)
        mape[model] = {
            bucket: round(float(per_h[lo - 1 : hi].mean()), 3)
            for bucket, (lo, hi) in REPORT_BUCKETS.items()
            if hi <= cfg.horizon_h
        }
        regret[model] = window_regret(
            predictions[model][:, day], actual[:, day], mask[:, day], window_h
        )
    inside = (actual >= predictions["p10"]) & (actual <= predictions["p90"])
    coverage = float((inside * mask).sum() / max(mask.sum(), 1.0))
    return BacktestResult(
        region=history.region,
        n_origins=len(origins),
        mape=mape,
        coverage_p10_p90=round(coverage, 3),
        window_regret=regret,
        choice=forecaster.describe_choice(),
        validation_mape=forecaster.validation_mape,
    )


def as_dict(result: BacktestResult) -> dict[str, Any]:
    """Return the result as plain JSON-able data."""
    return {
        "n_origins": result.n_origins,
        "mape_pct": result.mape,
        "coverage_p10_p90": result.coverage_p10_p90,
        "best_window_4h": result.window_regret,
        "choice": result.choice,
        "validation_mape_pct": {
            model: {f"{lo}-{hi}h": v for (lo, hi), v in zip(BUCKETS, values, strict=False)}
            for model, values in result.validation_mape.items()
        },
    }
