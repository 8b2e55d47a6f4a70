"""The rolling-origin loop: daily forecast origins, each forecast by the newest fit before it.

Expanding-window rolling origin with periodic re-estimation: every ``refit_days`` days of
the test span the forecaster is fitted again on all data before that refit origin, and the
origins up to the next refit are forecast from it. No forecast reads data at or after its
origin. Scoring the forecasts is :mod:`.backtest_scores`' job; :func:`.backtest.run_backtest`
puts the two together.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from greenserve.bench.forecaster.backtest_cache import fit_cached
from services.forecaster.config import ForecasterConfig
from services.forecaster.features import HourlyGrid, to_grid
from services.forecaster.models import CarbonForecaster, SharedFits
from services.forecaster.sources import CarbonHistory

__all__ = [
    "FitProgress",
    "RollingForecasts",
    "daily_origins",
    "refit_origins",
    "rolling_forecasts",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


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
