"""How the backtest scores forecasts: MAPE per horizon bucket, band coverage, window regret.

Pure functions of forecasts, actuals and the mask of observed target hours, shared by the
backtest's main scores and its second scoring on plausible actuals (hours a data screen
flags are masked out). Which models are reported, and over which horizon buckets, is fixed
here too (:data:`REPORTED_MODELS`, :data:`REPORT_BUCKETS`).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from services.forecaster.blend import mape_by_horizon
from services.forecaster.config import MIX
from shared.domain.best_window import window_means

__all__ = [
    "CURVE_MODELS",
    "REPORTED_MODELS",
    "REPORT_BUCKETS",
    "band_scores",
    "mape_table",
    "score_forecasts",
    "window_regret",
]

FloatArray = npt.NDArray[np.float64]

REPORT_BUCKETS: Final = {"1-6h": (1, 6), "day1": (1, 24), "day2": (25, 48)}
"""Reported horizon buckets (hours, inclusive); day 1 is CarbonCast's day-ahead MAPE."""
REPORTED_MODELS: Final = ("chosen", "template_level", "same_hour_yesterday", "hw", "gbm")
"""Models scored in the report, the chosen one first."""
CURVE_MODELS: Final = ("chosen", "template_level", "same_hour_yesterday")
"""Models whose MAPE is reported at every horizon (the per-horizon curve)."""


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


def mape_table(
    predictions: dict[str, FloatArray], actual: FloatArray, mask: FloatArray, horizon_h: int
) -> dict[str, dict[str, float]]:
    """MAPE (%) per reported model, per bucket of :data:`REPORT_BUCKETS` within the horizon."""
    table: dict[str, dict[str, float]] = {}
    # The source-production member is scored too where a fit computed it.
    for model in (*REPORTED_MODELS, *((MIX,) if MIX in predictions else ())):
        per_h = mape_by_horizon(predictions[model], actual, mask)
        table[model] = {
            bucket: round(float(per_h[lo - 1 : hi].mean()), 3)
            for bucket, (lo, hi) in REPORT_BUCKETS.items()
            if hi <= horizon_h
        }
    return table


def band_scores(
    p10: FloatArray, p90: FloatArray, actual: FloatArray, mask: FloatArray
) -> dict[str, float]:
    """Coverage of [p10, p90] over the observed targets, and its mean log-width."""
    inside = (actual >= p10) & (actual <= p90)
    weight = max(float(mask.sum()), 1.0)
    width = np.log(np.maximum(p90, 1e-9) / np.maximum(p10, 1e-9))
    return {
        "coverage": round(float((inside * mask).sum()) / weight, 3),
        "mean_log_width": round(float((width * mask).sum()) / weight, 4),
    }


def score_forecasts(
    predictions: dict[str, FloatArray],
    fixed: dict[str, FloatArray] | None,
    actual: FloatArray,
    mask: FloatArray,
    horizon_h: int,
    window_h: int,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """MAPE under the protocol, MAPE of the single fit, and the first day's window regret."""
    mape = mape_table(predictions, actual, mask, horizon_h)
    mape_fixed = mape if fixed is None else mape_table(fixed, actual, mask, horizon_h)
    day = slice(0, min(24, horizon_h))
    regret = {
        model: window_regret(predictions[model][:, day], actual[:, day], mask[:, day], window_h)
        for model in REPORTED_MODELS
    }
    return mape, mape_fixed, regret
