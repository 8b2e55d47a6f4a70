"""What a backtest reports: its result type and the plain JSON that the bench prints.

:class:`BacktestResult` holds one region's scores under the backtest's protocol (and under
a single fit, and on plausible actuals where asked); :func:`as_dict` turns it into the JSON
of ``greenserve bench forecaster``, leaving out what is only for plots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from greenserve.bench.forecaster.day_ahead import DayAheadSeries
from services.forecaster.config import BUCKETS

__all__ = ["BacktestResult", "PlausibleScores", "as_dict"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlausibleScores:
    """The same forecasts scored without the target hours a data screen flags as reporting
    errors (docs/forecaster.md, the session-10 scoring rule)."""

    unscored_hours: tuple[pd.Timestamp, ...]
    """Flagged hours inside the scored targets, left out for every model alike."""
    mape: dict[str, dict[str, float]]
    mape_fixed_fit: dict[str, dict[str, float]]
    window_regret: dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True, kw_only=True)
class BacktestResult:
    """Scores of one region's backtest."""

    region: str
    n_origins: int
    refit_days: int | None
    """Days between re-estimations inside the test span (``None``: fitted once)."""
    mape: dict[str, dict[str, float]]
    """MAPE (%) per model, then per bucket of :data:`REPORT_BUCKETS`, under the backtest's
    protocol (re-estimated every ``refit_days`` if set)."""
    mape_fixed_fit: dict[str, dict[str, float]]
    """The same for the single fit on the training span (equal to ``mape`` without refits)."""
    coverage_p10_p90: float
    """Share of test hours whose actual lies within [p10, p90] (nominal 0.8), for the band
    the config uses."""
    bands: dict[str, dict[str, float]]
    """Coverage and mean log-width of both bands, ``"validation"`` (the fit's) and
    ``"recent"`` (:mod:`services.forecaster.bands`), whichever is in use."""
    window_regret: dict[str, dict[str, float]]
    """Per model: best-window regret and saving versus running at the origin."""
    choice: dict[str, str]
    """The blend weights per horizon bucket, per fit (keyed by its refit origin)."""
    validation_mape: dict[str, dict[str, list[float]]]
    """MAPE (%) on each fit's own validation span (inside its training data) per candidate
    and ``"chosen"``, per bucket of :data:`services.forecaster.config.BUCKETS`, per fit."""
    mape_by_horizon: dict[str, list[float]]
    """MAPE (%) at each horizon 1..H for the chosen model and the two baselines, under the
    backtest's protocol (the buckets of ``mape`` are means of it)."""
    day_ahead: DayAheadSeries
    """The first day of every origin's forecast with the actuals (for plots; not in
    :func:`as_dict`)."""
    plausible: PlausibleScores | None = None
    """Scores on plausible actuals, where the caller named hours to leave out."""


def as_dict(result: BacktestResult) -> dict[str, Any]:
    """Return the result as plain JSON-able data."""
    return {
        "n_origins": result.n_origins,
        "refit_days": result.refit_days,
        "mape_pct": result.mape,
        "mape_pct_fixed_fit": result.mape_fixed_fit,
        "mape_pct_by_horizon": result.mape_by_horizon,
        "coverage_p10_p90": result.coverage_p10_p90,
        "bands": result.bands,
        "best_window_4h": result.window_regret,
        "choice": result.choice,
        "validation_mape_pct": {
            start: {
                model: {f"{lo}-{hi}h": v for (lo, hi), v in zip(BUCKETS, values, strict=False)}
                for model, values in per_model.items()
            }
            for start, per_model in result.validation_mape.items()
        },
        **({} if result.plausible is None else _plausible_dict(result.plausible)),
    }


def _plausible_dict(scores: PlausibleScores) -> dict[str, Any]:
    return {
        "unscored_hours": [str(t) for t in scores.unscored_hours],
        "mape_pct_plausible_actuals": scores.mape,
        "mape_pct_fixed_fit_plausible_actuals": scores.mape_fixed_fit,
        "best_window_4h_plausible_actuals": scores.window_regret,
    }
