"""Load forecaster for the planner: next 30 min of peak QPS per request class, per 5 min.

FREESH §2.5 (App. D.3) aggregates arrivals per request type in 5-s bins and, for each of the
six 5-minute blocks of the next epoch, takes peak QPS = largest 5-s count / 5; the planner
then requires capacity ≥ α × that peak (FREESH Eq. 1 demand constraint). FREESH forecasts
with an LSTM trained on a week of logs. With one hour of public trace we keep to models
that the data can check: the last block's peak, an EWMA of past peaks, the max of recent
peaks, and a same-time-yesterday template that falls back to the EWMA when the history is
shorter than a day.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from shared.paths import data_path

__all__ = [
    "LOAD_METHODS",
    "LoadForecastConfig",
    "backtest_load",
    "forecast_peak_qps",
    "load_azure_trace",
    "peak_qps_per_step",
]

FloatArray = npt.NDArray[np.float64]
LoadMethod = Literal["last", "ewma", "recent_max", "template"]
LOAD_METHODS: Final[tuple[LoadMethod, ...]] = ("last", "ewma", "recent_max", "template")
"""Available load models."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadForecastConfig:
    """Settings of the load forecaster (defaults are FREESH's epoch shape)."""

    bin_s: float = 5.0
    """Counting bin; peak QPS = largest bin count / bin_s."""
    step_s: float = 300.0
    """Planning step (one peak per step)."""
    steps: int = 6
    """Steps forecast (six 5-min steps = one 30-min epoch)."""
    method: LoadMethod = "ewma"
    ewma_alpha: float = 0.3
    """Weight of the newest step in the EWMA."""
    recent_steps: int = 3
    """Steps looked back by ``recent_max``."""
    period_s: float = 86_400.0
    """Season of the template model."""

    def __post_init__(self) -> None:
        if self.step_s % self.bin_s:
            raise ValueError("step_s must be a whole number of bins")
        if not 0.0 < self.ewma_alpha <= 1.0 or self.steps < 1 or self.recent_steps < 1:
            raise ValueError("need 0 < ewma_alpha <= 1, steps >= 1, recent_steps >= 1")


def load_azure_trace(name: Literal["code", "conv"]) -> FloatArray:
    """Return arrival times (s from the first request) of an Azure LLM inference trace."""
    frame = pd.read_csv(data_path("traces", f"AzureLLMInferenceTrace_{name}.csv"))
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="mixed")
    seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)
    return np.sort(seconds)


def peak_qps_per_step(
    arrivals_s: npt.ArrayLike, start_s: float, n_steps: int, config: LoadForecastConfig
) -> FloatArray:
    """FREESH §2.5 aggregation: per step from ``start_s``, the largest bin count / bin_s."""
    times = np.asarray(arrivals_s, dtype=np.float64)
    bins_per_step = round(config.step_s / config.bin_s)
    edges = start_s + config.bin_s * np.arange(n_steps * bins_per_step + 1)
    counts, _ = np.histogram(times, bins=edges)
    result: FloatArray = counts.reshape(n_steps, bins_per_step).max(axis=1) / config.bin_s
    return result


def forecast_peak_qps(past_peaks: npt.ArrayLike, config: LoadForecastConfig) -> FloatArray:
    """Forecast the next ``config.steps`` peaks from past per-step peaks (oldest first).

    Raises:
        ValueError: with no history at all.
    """
    past = np.asarray(past_peaks, dtype=np.float64)
    if past.size == 0:
        raise ValueError("the load forecaster needs at least one past step")
    period_steps = round(config.period_s / config.step_s)
    if config.method == "template" and past.size >= period_steps:
        start = past.size - period_steps
        season = past[start : start + config.steps]
        level = past[-1] / max(past[start - 1], 1e-9) if start >= 1 else 1.0
        return np.asarray(season * level, dtype=np.float64)
    if config.method == "last":
        value = past[-1]
    elif config.method == "recent_max":
        value = past[-config.recent_steps :].max()
    else:
        weights = (1.0 - config.ewma_alpha) ** np.arange(past.size)[::-1]
        value = float(np.dot(weights, past) / weights.sum())
    return np.full(config.steps, float(value))


def backtest_load(
    arrivals_by_class: Mapping[str, npt.ArrayLike],
    config: LoadForecastConfig,
    *,
    origin_every_s: float = 60.0,
    alpha: float = 1.1,
) -> dict[str, dict[str, float]]:
    """Rolling-origin backtest: forecast each full epoch that fits the trace.

    Origins every ``origin_every_s`` from one step in; only arrivals before the origin are
    used. Reports per class the MAPE of the peak per horizon step, and how often the actual
    peak exceeded ``alpha`` × forecast (the planner's under-provisioning risk).
    """
    report: dict[str, dict[str, float]] = {}
    for name, raw in arrivals_by_class.items():
        times = np.asarray(raw, dtype=np.float64)
        end = float(times.max())
        errors, shortfalls = [], []
        origin = config.step_s
        while origin + config.steps * config.step_s <= end:
            history_steps = int(origin // config.step_s)
            past_start = origin - history_steps * config.step_s
            past = peak_qps_per_step(times[times < origin], past_start, history_steps, config)
            predicted = forecast_peak_qps(past, config)
            actual = peak_qps_per_step(times, origin, config.steps, config)
            errors.append(np.abs(predicted - actual) / np.maximum(actual, 1.0 / config.bin_s))
            shortfalls.append(actual > alpha * predicted)
            origin += origin_every_s
        if not errors:
            continue
        err, short = np.array(errors), np.array(shortfalls)
        report[name] = {
            "origins": float(len(errors)),
            "mape_step1_pct": round(float(err[:, 0].mean() * 100.0), 2),
            "mape_epoch_pct": round(float(err.mean() * 100.0), 2),
            "under_alpha_rate": round(float(short.mean()), 3),
        }
    return report
