"""The carbon-aware-sdk "best window" query: lowest mean intensity over a contiguous window.

Mirrors the SDK's ``/emissions/forecasts/current?windowSize=`` answer (``optimalDataPoints``):
given a forecast and a window length, return where the window should start and the mean
intensity it would see. Ties go to the earliest start, as running sooner is never worse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["ForecastSeries", "best_window", "best_window_index", "window_means"]

FloatArray = npt.NDArray[np.float64]


class ForecastSeries(Protocol):
    """What the search reads of a forecast (``services.forecaster.models.CarbonForecast``)."""

    @property
    def issued_at(self) -> pd.Timestamp:
        """Timestamp of the first value."""
        ...

    @property
    def step_s(self) -> int:
        """Seconds between values."""
        ...

    @property
    def values(self) -> Sequence[float]:
        """Forecast intensity per step."""
        ...


def window_means(values: npt.ArrayLike, window_steps: int) -> FloatArray:
    """Return the mean over every contiguous window of ``window_steps`` along the last axis.

    Raises:
        ValueError: when the window is empty or longer than the series.
    """
    series = np.asarray(values, dtype=np.float64)
    length = series.shape[-1]
    if not 1 <= window_steps <= length:
        raise ValueError(f"window of {window_steps} steps does not fit {length} values")
    zero = np.zeros((*series.shape[:-1], 1))
    cumulative = np.concatenate([zero, np.cumsum(series, axis=-1)], axis=-1)
    means: FloatArray = (
        cumulative[..., window_steps:] - cumulative[..., :-window_steps]
    ) / window_steps
    return means


def best_window_index(values: Sequence[float] | FloatArray, window_steps: int) -> tuple[int, float]:
    """Return ``(start index, mean)`` of the lowest-mean window of ``window_steps`` values."""
    means = window_means(values, window_steps)
    start = int(np.argmin(means))
    return start, float(means[start])


def best_window(forecast: ForecastSeries, window_h: float) -> tuple[pd.Timestamp, float]:
    """Return the start time and mean forecast intensity of the best ``window_h``-hour window.

    Args:
        forecast: the forecast to search.
        window_h: window length in hours; must be a whole number of forecast steps.

    Raises:
        ValueError: when the window is not a whole number of steps or does not fit.
    """
    steps = window_h * 3600.0 / forecast.step_s
    if steps != int(steps):
        raise ValueError(f"{window_h} h is not a whole number of {forecast.step_s} s steps")
    start, mean = best_window_index(forecast.values, int(steps))
    return forecast.issued_at + pd.Timedelta(seconds=start * forecast.step_s), mean
