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
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from services.forecaster.bands import RECENT_DAYS, rolling_bands
from services.forecaster.best_window import window_means
from services.forecaster.blend import mape_by_horizon
from services.forecaster.config import BUCKETS, MIX, ForecasterConfig
from services.forecaster.day_ahead import DayAheadSeries, day_ahead_series
from services.forecaster.features import HourlyGrid, to_grid
from services.forecaster.model_cache import load_or_fit
from services.forecaster.models import CarbonForecaster, SharedFits, fit_forecaster
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

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

REPORT_BUCKETS: Final = {"1-6h": (1, 6), "day1": (1, 24), "day2": (25, 48)}
"""Reported horizon buckets (hours, inclusive); day 1 is CarbonCast's day-ahead MAPE."""
REPORTED_MODELS: Final = ("chosen", "template_level", "same_hour_yesterday", "hw", "gbm")
"""Models scored in the report, the chosen one first."""
CURVE_MODELS: Final = ("chosen", "template_level", "same_hour_yesterday")
"""Models whose MAPE is reported at every horizon (the per-horizon curve)."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class RollingForecasts:
    """Forecasts of many daily origins, each made by the newest fit before it."""

    origins: IntArray
    """Grid indices of the forecast origins."""
    predictions: dict[str, FloatArray]
    """``(n, H)`` per model (as :meth:`CarbonForecaster.predict`), row i from the fit whose
    refit origin is the latest one at or before ``origins[i]``."""
    fits: tuple[tuple[pd.Timestamp, CarbonForecaster], ...]
    """Each fit with its refit origin (the first origin it forecasts; its data end 1 h
    before). The first is the fit on the training span."""
    fit_of_origin: IntArray
    """Index into ``fits`` of the fit used for each origin."""


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


def code_digest() -> str:
    """Digest of every module of the forecaster package (part of the bench cache's key).

    A fixed list of modules missed those split out later (``booster_rows``, ``blend``,
    ``holidays``, ``sun``), so a change there reused a stale cached fit; every module is
    read now, at the price of a refit after any edit to the package. Read once, at import:
    a long bench whose package is edited while it runs must key its fits by the code it
    runs, not by the files on disk at the time of each fit.
    """
    return _CODE_DIGEST


def package_digest(package: Path) -> str:
    """Digest of the names and bytes of every module in ``package``."""
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


_CODE_DIGEST: Final = package_digest(Path(__file__).parent)


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
    shared: SharedFits | None = None,
) -> tuple[CarbonForecaster, bool]:
    """Fit a forecaster (see :func:`fit_forecaster`), or load the one fitted on the same inputs.

    ``shared`` (not part of the key: it changes the time a fit takes, not its result) is
    passed on to :func:`fit_forecaster`.

    Returns:
        The forecaster and whether it came from the cache.
    """
    key_material = repr(
        (
            _fingerprint(history),
            [_fingerprint(other) for other in related],
            config,
            code_digest(),
        )
    )
    key = f"{history.region}-{hashlib.sha256(key_material.encode()).hexdigest()[:24]}.pkl"
    fitted = False

    def fit() -> CarbonForecaster:
        nonlocal fitted
        fitted = True
        return fit_forecaster(history, config=config, related=related, shared=shared)

    # The live service's cache (model_cache) keys by a version number, so a restart reuses
    # a fit across unrelated edits; the bench keys by the code itself (above). Both store
    # and load through one function: atomic writes, unreadable entries refitted.
    return load_or_fit(cache_dir, key, fit, CarbonForecaster), not fitted


def refit_origins(
    first_origin: pd.Timestamp, last_origin: pd.Timestamp, refit_days: int | None
) -> list[pd.Timestamp]:
    """Refit origins from ``first_origin`` every ``refit_days`` days up to ``last_origin``.

    ``None`` (or 0) means one fit, at ``first_origin``. A fit made at refit origin ``r``
    learns from data up to ``r - 1 h`` and forecasts the origins in ``[r, next r)``.
    """
    if refit_days is not None and refit_days < 0:
        raise ValueError("refit_days must be positive (or None for one fit)")
    if not refit_days:
        return [first_origin]
    step = pd.Timedelta(days=refit_days)
    result = [first_origin]
    while result[-1] + step <= last_origin:
        result.append(result[-1] + step)
    return result


FitProgress = Callable[[int, int, pd.Timestamp, float, bool], None]
"""Called after each fit of a backtest with (fit number from 1, fits, the fit's data end,
seconds it took, whether it came from the cache): a cold EIA run fits for minutes."""


def rolling_forecasts(
    history: CarbonHistory,
    train_end: pd.Timestamp,
    *,
    config: ForecasterConfig | None = None,
    refit_days: int | None = None,
    max_origins: int | None = None,
    cache_dir: Path | None = None,
    related: Sequence[CarbonHistory] = (),
    shared: SharedFits | None = None,
    on_fit: FitProgress | None = None,
) -> RollingForecasts:
    """Forecast every daily origin after ``train_end``, re-estimating every ``refit_days``.

    Expanding-window rolling-origin backtest with periodic re-estimation: the fit used at
    an origin is the one made at the latest refit origin ``r`` at or before it, on the
    region's history (and the related regions') up to ``r - 1 h``, with its blend weights
    and quantiles chosen on that fit's own validation span, which also lies before ``r``.
    Every forecast still reads ``y[:origin]`` only.

    Args:
        history: the region's full history (train and test).
        train_end: last timestamp the first fit may learn from.
        config: forecaster settings.
        refit_days: days between refits inside the test span; ``None`` fits once.
        max_origins: forecast at most this many origins, evenly spaced over the test span.
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
    grid = to_grid(history)
    first = train_end + pd.Timedelta(hours=1)
    origins = daily_origins(grid, first, cfg.horizon_h)
    if max_origins is not None and len(origins) > max_origins:
        origins = origins[np.linspace(0, len(origins) - 1, max_origins).round().astype(int)]
    if not origins.size:
        raise ValueError(f"no test origin after {train_end} for {history.region}")
    last = grid.start + pd.Timedelta(hours=int(origins[-1]))
    starts = refit_origins(first, last, refit_days)
    start_index = np.array([grid.index_of(start) for start in starts], dtype=np.int64)
    block = np.searchsorted(start_index, origins, side="right") - 1
    # Fit the first block (the fixed fit, reported too) and every block with an origin.
    used = sorted({0, *(int(b) for b in block)})
    fits: list[tuple[pd.Timestamp, CarbonForecaster]] = []
    for number, k in enumerate(used, start=1):
        cut = starts[k] - pd.Timedelta(hours=1)
        began = time.perf_counter()
        forecaster, cached = fit_cached(
            history.until(cut),
            cfg,
            cache_dir,
            [other.until(cut) for other in related],
            shared=shared,
        )
        fits.append((starts[k], forecaster))
        if on_fit is not None:
            on_fit(number, len(used), cut, time.perf_counter() - began, cached)
    fit_of_origin = np.searchsorted(np.array(used), block).astype(np.int64)
    predictions: dict[str, FloatArray] = {}
    for k, (_, forecaster) in enumerate(fits):
        rows = fit_of_origin == k
        if not rows.any():
            continue
        part = forecaster.predict(grid, origins[rows])
        for name, values in part.items():
            if name not in predictions:
                predictions[name] = np.zeros((len(origins), values.shape[1]))
            predictions[name][rows] = values
    return RollingForecasts(
        origins=origins, predictions=predictions, fits=tuple(fits), fit_of_origin=fit_of_origin
    )


def _mape_table(
    predictions: dict[str, FloatArray], actual: FloatArray, mask: FloatArray, horizon_h: int
) -> dict[str, dict[str, float]]:
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


def _band_scores(
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


def _scores(
    predictions: dict[str, FloatArray],
    fixed: dict[str, FloatArray] | None,
    actual: FloatArray,
    mask: FloatArray,
    horizon_h: int,
    window_h: int,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """MAPE under the protocol, MAPE of the single fit, and the first day's window regret."""
    mape = _mape_table(predictions, actual, mask, horizon_h)
    mape_fixed = mape if fixed is None else _mape_table(fixed, actual, mask, horizon_h)
    day = slice(0, min(24, horizon_h))
    regret = {
        model: window_regret(predictions[model][:, day], actual[:, day], mask[:, day], window_h)
        for model in REPORTED_MODELS
    }
    return mape, mape_fixed, regret


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
        "validation": _band_scores(predictions["p10"], predictions["p90"], actual, mask),
        "recent": _band_scores(recent_p10, recent_p90, actual, mask),
    }
    bands["recent"]["origins_with_recent_band"] = float(recent_rows.sum())
    if cfg.recent_band_days:
        predictions = {**predictions, "p10": recent_p10, "p90": recent_p90}
    fixed = rolling.fits[0][1].predict(grid, origins) if len(rolling.fits) > 1 else None
    mape, mape_fixed, regret = _scores(predictions, fixed, actual, mask, cfg.horizon_h, window_h)
    by_horizon = {
        model: [round(float(v), 3) for v in mape_by_horizon(predictions[model], actual, mask)]
        for model in CURVE_MODELS
    }
    plausible = None
    if unscored is not None:
        flagged = grid.times().isin(unscored)[targets]
        keep = mask * ~flagged
        scores = _scores(predictions, fixed, actual, keep, cfg.horizon_h, window_h)
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
