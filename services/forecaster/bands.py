"""p10/p90 bands from the realised errors of recently issued forecasts (rolling split conformal).

A fit's band comes from its validation span (the last 30 % of its history): in autumn the
spring and summer errors understate the spread, and the test-span coverage of a nominal 80 %
band was 0.66-0.87. Here the band of a forecast issued at hour ``at`` takes the p10/p90 of
log(actual / forecast) per horizon (pooled over ±``pool_h`` hours, as the validation band)
from the forecasts issued in the ``days`` days before ``at``, counting only target hours
whose actual is known by ``at``'s data end (``at - 1``): nothing from the future. While the
issued forecasts span fewer than ``min_days``, there is no recent band and the caller keeps
the validation band. Rule and decision: docs/forecaster.md, *Bands from recent errors*.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from services.forecaster.blend import log_quantiles
from services.forecaster.config import RECENT_BAND_DAYS
from services.forecaster.models import CarbonForecast
from services.forecaster.sources import CarbonHistory

__all__ = [
    "MIN_DAYS",
    "RECENT_DAYS",
    "IssuedForecasts",
    "recent_log_quantiles",
    "rolling_bands",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

RECENT_DAYS: Final = RECENT_BAND_DAYS
"""Days of issued forecasts whose errors set the band (fixed a priori, not tuned)."""
MIN_DAYS: Final = 14
"""The issued forecasts must span this many days before the recent band replaces the
validation band (fixed a priori)."""


def recent_log_quantiles(
    issued: IntArray,
    forecasts: FloatArray,
    actual: FloatArray,
    observed: FloatArray,
    at: int,
    *,
    days: int = RECENT_DAYS,
    min_days: int = MIN_DAYS,
    pool_h: int = 2,
) -> FloatArray | None:
    """The ``(H, 2)`` p10/p90 of log(actual / forecast) for a forecast issued at ``at``.

    Args:
        issued: hour index at which each past forecast was issued: its first target hour
            (row i's column k forecasts hour ``issued[i] + k``).
        forecasts: ``(n, H)`` the point forecasts as issued.
        actual: ``(n, H)`` the actual at each target hour (any value where unknown).
        observed: ``(n, H)`` 1 where that actual is a real observation, else 0.
        at: the hour index of the forecast to band; its data end at ``at - 1``.
        days: how far back issued forecasts count.
        min_days: the issued forecasts in the window must reach back this far.
        pool_h: horizons pooled on each side.

    Returns:
        The quantiles, or ``None`` when the window holds too little history (or no realised
        error at some horizon), in which case the caller keeps its validation band.
    """
    window = (issued < at) & (issued >= at - days * 24)
    if not window.any() or at - int(issued[window].min()) < min_days * 24:
        return None
    horizon = forecasts.shape[1]
    targets = issued[window, None] + np.arange(horizon)[None, :]
    known = (targets <= at - 1) & (observed[window] > 0)
    # Every horizon needs a realised error within its pool, or the band is not estimable.
    pooled = np.convolve(known.any(axis=0), np.ones(2 * pool_h + 1), mode="same")
    if not (pooled > 0).all():
        return None
    return log_quantiles(forecasts[window], actual[window], known.astype(np.float64), pool_h)


def rolling_bands(
    origins: IntArray,
    chosen: FloatArray,
    actual: FloatArray,
    observed: FloatArray,
    validation: tuple[FloatArray, FloatArray],
    *,
    days: int = RECENT_DAYS,
    min_days: int = MIN_DAYS,
    pool_h: int = 2,
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """p10 and p90 of every origin's forecast from the errors of the origins before it.

    ``validation`` holds the ``(n, H)`` p10/p90 of the fits' own band, kept where there is
    no recent band yet. Also returns which origins got a recent band.
    """
    p10, p90 = validation[0].copy(), validation[1].copy()
    recent = np.zeros(len(origins), dtype=bool)
    for i, at in enumerate(origins):
        q = recent_log_quantiles(
            origins[:i],
            chosen[:i],
            actual[:i],
            observed[:i],
            int(at),
            days=days,
            min_days=min_days,
            pool_h=pool_h,
        )
        if q is None:
            continue
        p10[i] = chosen[i] * np.exp(q[:, 0])
        p90[i] = chosen[i] * np.exp(q[:, 1])
        recent[i] = True
    return p10, p90, recent


class IssuedForecasts:
    """The forecasts one region's live service has issued, to band the next one by their errors.

    One per origin hour (a later issue at the same hour replaces the earlier), for ``days``
    days. The service also keeps them in the store (:mod:`services.forecaster.issued_store`)
    and :meth:`restore` s them after a restart; without them the band is the validation
    band until the forecasts issued since span ``min_days``.
    """

    def __init__(
        self, *, days: int = RECENT_DAYS, min_days: int = MIN_DAYS, pool_h: int = 2
    ) -> None:
        self.days = days
        self.min_days = min_days
        self.pool_h = pool_h
        self._issued: dict[int, FloatArray] = {}

    def __len__(self) -> int:
        return len(self._issued)

    def entries(self) -> dict[int, FloatArray]:
        """The forecasts held, by the hour (since the epoch) they were issued at."""
        return dict(self._issued)

    def restore(self, hour: int, values: Sequence[float]) -> None:
        """Take back a forecast issued at ``hour`` (after a restart, from the store)."""
        self._issued[hour] = np.asarray(values, dtype=np.float64)

    def banded(self, forecast: CarbonForecast, history: CarbonHistory) -> CarbonForecast:
        """Record ``forecast`` and return it with the recent band where there is one.

        ``history`` supplies the actuals; only those before ``forecast.issued_at`` are read.
        """
        at = _hour(forecast.issued_at)
        values = np.asarray(forecast.values, dtype=np.float64)
        quantiles = self._quantiles(at, len(values), history)
        self._issued[at] = values
        # Older than the window, or "issued" after this forecast (a store written by a run
        # whose model time was ahead of this one's): neither can count again.
        for old in [h for h in self._issued if not at - self.days * 24 <= h <= at]:
            del self._issued[old]
        if quantiles is None:
            return forecast
        return dataclasses.replace(
            forecast,
            p10=tuple(float(v) for v in values * np.exp(quantiles[:, 0])),
            p90=tuple(float(v) for v in values * np.exp(quantiles[:, 1])),
        )

    def _quantiles(self, at: int, horizon: int, history: CarbonHistory) -> FloatArray | None:
        past = [(h, v) for h, v in sorted(self._issued.items()) if h < at and len(v) >= horizon]
        if not past:
            return None
        issued = np.array([h for h, _ in past], dtype=np.int64)
        forecasts = np.stack([v[:horizon] for _, v in past])
        # Only the hours the held forecasts target, never past the data end.
        known = history.intensity.loc[_stamp(int(issued[0])) : _stamp(at - 1)].dropna()
        by_hour = pd.Series(
            known.to_numpy(dtype=np.float64),
            index=(pd.DatetimeIndex(known.index) - _EPOCH) // _HOUR,
        )
        targets = issued[:, None] + np.arange(horizon)[None, :]
        actual = by_hour.reindex(targets.ravel()).to_numpy(dtype=np.float64).reshape(targets.shape)
        observed = np.isfinite(actual).astype(np.float64)
        return recent_log_quantiles(
            issued,
            forecasts,
            np.nan_to_num(actual, nan=1.0),
            observed,
            at,
            days=self.days,
            min_days=self.min_days,
            pool_h=self.pool_h,
        )


_EPOCH: Final = pd.Timestamp(0, tz="UTC")
_HOUR: Final = pd.Timedelta(hours=1)


def _hour(stamp: pd.Timestamp) -> int:
    """Hours since the Unix epoch (the index the issued forecasts are kept by)."""
    return int((pd.Timestamp(stamp) - _EPOCH) // _HOUR)


def _stamp(hour: int) -> pd.Timestamp:
    return _EPOCH + hour * _HOUR
