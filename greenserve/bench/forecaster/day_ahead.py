"""What a forecaster issuing once a day would have shown: the day-ahead series of a backtest.

The backtest forecasts from a daily origin at 00:00 UTC; the first 24 h of consecutive
origins tile the test span, so laid end to end they are the day-ahead forecast an operator
would have seen, hour by hour, beside what happened. The bench plots it
(``greenserve bench forecaster --plots DIR``); the per-horizon MAPE curve is the other half
of that picture.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from services.forecaster.features import HourlyGrid

__all__ = ["PLOTTED_MODELS", "DayAheadSeries", "day_ahead_series"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PLOTTED_MODELS = ("chosen", "p10", "p90", "template_level")
"""The forecasts the series keeps: the blend, its band and the baseline it must beat."""


@dataclass(frozen=True, slots=True)
class DayAheadSeries:
    """Hours ``1..day`` of each origin's forecast and the actual values, origin by origin."""

    times: pd.DatetimeIndex
    """UTC time of every hour (origin-major; consecutive origins are contiguous when the
    origins are daily)."""
    actual: FloatArray
    """The observed intensity (NaN where the history had a gap)."""
    forecasts: dict[str, FloatArray]
    """Per model of :data:`PLOTTED_MODELS`, aligned with ``times``."""


def day_ahead_series(
    grid: HourlyGrid, origins: IntArray, predictions: dict[str, FloatArray], day_h: int = 24
) -> DayAheadSeries:
    """The first ``day_h`` hours of every origin's forecast, with the actuals."""
    horizon = min(day_h, next(iter(predictions.values())).shape[1])
    targets = (origins[:, None] + np.arange(horizon)[None, :]).ravel()
    actual = np.where(grid.observed[targets], grid.y[targets], np.nan)
    return DayAheadSeries(
        times=pd.DatetimeIndex(grid.start + pd.to_timedelta(targets, unit="h")),
        actual=actual,
        forecasts={m: predictions[m][:, :horizon].ravel() for m in PLOTTED_MODELS},
    )
