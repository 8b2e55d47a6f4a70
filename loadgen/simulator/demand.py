"""Simulator-side demand signals for the epoch planner: observed peaks and a trend forecast.

The live planner's :class:`~services.planner.live_inputs.DemandTracker` forecasts a flat
``recent_max`` (FREESH §2.5 peaks per step, then the largest of the recent steps). On a
rising load that flat forecast falls behind for the whole epoch. This module keeps its own
copy of the same completions (arrival time and class) so the simulator can (a) read the last
whole step's observed peak QPS, the trigger of an event re-plan, and (b) forecast with the
recent trend. Both use :func:`shared.domain.load_forecast.peak_qps_per_step` (FREESH
§2.5 binning) and the tracker's own history lag (p90 E2E), so they see what live would.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.domain.load_forecast import LoadForecastConfig, peak_qps_per_step

__all__ = ["ArrivalHistory", "forecast_error_alpha", "trend_peak_qps"]


def trend_peak_qps(past_peaks: npt.ArrayLike, steps: int, recent_steps: int) -> tuple[float, ...]:
    """Forecast ``steps`` peaks: the recent max plus the recent least-squares trend.

    The line is fitted through the last ``recent_steps`` peaks (the window ``recent_max``
    looks at) and extrapolated to each future step; a forecast step is never below the
    recent max, so a falling or flat load forecasts exactly as ``recent_max`` does.

    Raises:
        ValueError: with no history at all.
    """
    past = np.asarray(past_peaks, dtype=np.float64)
    if past.size == 0:
        raise ValueError("the trend forecast needs at least one past step")
    recent = past[-recent_steps:]
    level = float(recent.max())
    if recent.size < 2:
        return (level,) * steps
    x = np.arange(recent.size, dtype=np.float64)
    slope, intercept = np.polyfit(x, recent, 1)
    ahead = intercept + slope * (recent.size - 1 + np.arange(1, steps + 1))
    return tuple(float(v) for v in np.maximum(ahead, level))


def forecast_error_alpha(
    past_peaks: dict[str, npt.NDArray[np.float64]], recent_steps: int, quantile: float
) -> float | None:
    """α from the live forecast's own past errors (FREESH's α, measured instead of set).

    For every past step with at least one step before it, the live rule's forecast of the
    total (Σ over classes of the ``recent_max`` of the preceding ``recent_steps`` peaks) is
    compared with the total realised peak; α is the ``quantile`` of realised / forecast, at
    least 1. ``None`` without any such step (the caller keeps its default α).
    """
    if not past_peaks:
        return None
    peaks = np.vstack(list(past_peaks.values()))
    ratios = []
    for step in range(1, peaks.shape[1]):
        window = peaks[:, max(0, step - recent_steps) : step]
        forecast = float(window.max(axis=1).sum())
        if forecast > 0:
            ratios.append(float(peaks[:, step].sum()) / forecast)
    if not ratios:
        return None
    return max(1.0, float(np.quantile(ratios, quantile, method="inverted_cdf")))


class ArrivalHistory:
    """Arrival times per class from completions; per-step peak QPS ending at a given time."""

    def __init__(self, config: LoadForecastConfig, history_steps: int) -> None:
        """Bin and step as ``config``; keep at most ``history_steps`` steps of arrivals."""
        self._config = config
        self._history_steps = history_steps
        self._arrivals: dict[str, list[float]] = defaultdict(list)

    def add(self, arrival_s: float, request_class: str) -> None:
        """Record one arrival (completions come roughly, not exactly, in arrival order)."""
        bisect.insort(self._arrivals[request_class], arrival_s)

    def past_peaks(self, end_s: float, steps: int) -> dict[str, npt.NDArray[np.float64]]:
        """Peak QPS per class for each of the ``steps`` whole steps ending at ``end_s``."""
        steps = max(1, min(steps, self._history_steps))
        start = end_s - steps * self._config.step_s
        out: dict[str, npt.NDArray[np.float64]] = {}
        for cls, times in self._arrivals.items():
            del times[: bisect.bisect_left(times, start - self._config.step_s)]
            out[cls] = peak_qps_per_step(np.asarray(times), start, steps, self._config)
        return out

    def forecast(
        self, end_s: float, steps_observed: int, classes: Sequence[str], recent_steps: int
    ) -> dict[str, tuple[float, ...]]:
        """:func:`trend_peak_qps` per class; classes never seen forecast zero."""
        past = self.past_peaks(end_s, steps_observed)
        zero = (0.0,) * self._config.steps
        return {
            cls: trend_peak_qps(past[cls], self._config.steps, recent_steps)
            if cls in past
            else zero
            for cls in classes
        }
