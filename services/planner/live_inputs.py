"""Live planner inputs: the fleet as inventory, observed demand, forecast intensity. Pure.

* Inventory: registered workers (their heartbeats) grouped by pool; a pool is one mode
  (GPU × TP) in one region, as ``greenserve.stack`` lays them out.
* Demand: arrivals per (partition, class) from completions, counted in ``bin_s`` bins; a
  step's peak QPS is its largest bin ÷ bin (FREESH §2.5), and the next epoch's steps are
  forecast by :func:`shared.domain.load_forecast.forecast_peak_qps` (default: the
  peak of the recent steps). The planner multiplies by α (FREESH Eq. 1b). A completion is
  classified under every candidate scheme from its true token counts, so the planner can
  compare partitions the classifier is not applying now. A request is seen only when it
  finishes, so the history ends one lag before now: the 90th percentile of recent E2E
  latencies (steps younger than that would look emptier than they were).
  With ``coincident`` demand a class's step peak is instead its share of the step's
  arrivals times the peak bin rate of the partition's *total* arrivals: the classes share
  one pool, so their peaks need not be summed (on the conv trace the sum of per-class 5-s
  peaks is twice the total's 5-s peak and four times the mean rate).
* Intensity: the region's latest carbon forecast sampled at each step's start; the last
  value seen for the region when no forecast covers a step.
"""

from __future__ import annotations

import bisect
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from proto.messages import Forecast, WorkerStats
from shared.domain.classes import ClassScheme
from shared.domain.load_forecast import (
    LoadForecastConfig,
    forecast_peak_qps,
    peak_qps_per_step,
)
from shared.domain.plan import worker_order

__all__ = [
    "DemandTracker",
    "LivePool",
    "intensity_steps",
    "pools_from_stats",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class LivePool:
    """One live pool: its mode, region and registered workers (in parking order)."""

    pool_id: str
    region: str
    gpu: str
    tp: int
    model: str
    workers: tuple[str, ...]

    @property
    def gpus(self) -> int:
        """GPUs the pool's workers hold."""
        return self.tp * len(self.workers)


def pools_from_stats(stats: Iterable[WorkerStats]) -> dict[str, LivePool]:
    """Group worker heartbeats by pool; a pool's mode is its most common (GPU, TP, model)."""
    members: dict[str, list[WorkerStats]] = defaultdict(list)
    for s in stats:
        members[s.pool_id].append(s)
    pools: dict[str, LivePool] = {}
    for pool_id, group in sorted(members.items()):
        modes: dict[tuple[str, str, int, str], int] = defaultdict(int)
        for s in group:
            modes[(s.region, s.gpu, s.tp, s.model)] += 1
        region, gpu, tp, model = max(sorted(modes), key=lambda m: modes[m])
        mode = (region, gpu, tp, model)
        workers = sorted(
            (s.worker_id for s in group if (s.region, s.gpu, s.tp, s.model) == mode),
            key=worker_order,
        )
        pools[pool_id] = LivePool(
            pool_id=pool_id, region=region, gpu=gpu, tp=tp, model=model, workers=tuple(workers)
        )
    return pools


class DemandTracker:
    """Observed arrivals per (partition, class), and the load forecast made from them."""

    def __init__(
        self,
        schemes: Mapping[str, ClassScheme],
        config: LoadForecastConfig,
        history_steps: int,
        *,
        coincident: bool = False,
    ) -> None:
        """Track arrivals under every scheme (keyed by partition name).

        ``coincident``: a class's step peak is its share of the step's arrivals times the
        peak bin rate of all its partition's arrivals (else its own peak bin rate).
        """
        self._coincident = coincident
        self._schemes = dict(schemes)
        self._config = config
        self._history_steps = history_steps
        self._arrivals: dict[tuple[str, str], list[float]] = defaultdict(list)
        self._first_s: float | None = None
        self._latencies: deque[float] = deque(maxlen=256)

    @property
    def config(self) -> LoadForecastConfig:
        """Binning and forecast settings (step length, steps per epoch)."""
        return self._config

    def add(
        self, arrival_s: float, input_tokens: int, output_tokens: int, latency_s: float = 0.0
    ) -> None:
        """Record one arrival (model time) with its true sizes and its E2E latency."""
        self._latencies.append(max(0.0, latency_s))
        if self._first_s is None or arrival_s < self._first_s:
            self._first_s = arrival_s
        for partition, scheme in self._schemes.items():
            times = self._arrivals[(partition, scheme.classify(input_tokens, output_tokens))]
            bisect.insort(times, arrival_s)  # completions arrive roughly, not exactly, in order

    @property
    def lag_s(self) -> float:
        """How far behind now the history ends: p90 of recent E2E latencies."""
        if not self._latencies:
            return 0.0
        return float(np.quantile(np.fromiter(self._latencies, dtype=np.float64), 0.9))

    def observed_steps(self, now_s: float) -> int:
        """Whole steps between the first observed arrival and ``now_s − lag`` (0: none yet)."""
        if self._first_s is None:
            return 0
        return max(0, int((now_s - self.lag_s - self._first_s) // self._config.step_s))

    def forecast(
        self, now_s: float, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[float, ...]]:
        """Peak QPS per step of the next epoch for each (partition, class) in ``keys``.

        History is the whole steps ending at ``now_s − lag`` since the first arrival, at most
        ``history_steps``; older arrivals are dropped. Classes never seen forecast zero.
        """
        step_s = self._config.step_s
        steps = min(self._history_steps, max(1, self.observed_steps(now_s)))
        start = now_s - self.lag_s - steps * step_s
        for times in self._arrivals.values():
            del times[: bisect.bisect_left(times, start)]
        out: dict[tuple[str, str], tuple[float, ...]] = {}
        shared = self._coincident_peaks(start, steps) if self._coincident else {}
        for key in keys:
            times = self._arrivals.get(key, [])
            if not times:
                out[key] = (0.0,) * self._config.steps
                continue
            past = shared.get(key)
            if past is None:
                past = peak_qps_per_step(np.asarray(times), start, steps, self._config)
            out[key] = tuple(float(v) for v in forecast_peak_qps(past, self._config))
        return out

    def _coincident_peaks(self, start_s: float, steps: int) -> dict[tuple[str, str], np.ndarray]:
        """Per (partition, class): share of each step's arrivals × the partition's total peak."""
        config = self._config
        edges = start_s + config.step_s * np.arange(steps + 1)
        counts = {
            key: np.histogram(np.asarray(times), bins=edges)[0].astype(np.float64)
            for key, times in self._arrivals.items()
        }
        out: dict[tuple[str, str], np.ndarray] = {}
        for partition in self._schemes:
            keys = [k for k in counts if k[0] == partition]
            if not keys:
                continue
            every = np.concatenate([np.asarray(self._arrivals[k]) for k in keys])
            total_peak = peak_qps_per_step(every, start_s, steps, config)
            total = np.sum([counts[k] for k in keys], axis=0)
            for key in keys:
                share = np.divide(counts[key], total, out=np.zeros(steps), where=total > 0)
                out[key] = share * total_peak
        return out


def intensity_steps(
    forecast: Forecast | None, start_s: float, step_s: float, steps: int, last_value: float | None
) -> tuple[float, ...] | None:
    """Intensity at each step start from a forecast (hourly values from ``start_s``).

    Steps before the forecast's first value take its first value; steps past its end take
    its last. Without a forecast every step takes ``last_value`` (``None`` when unknown).
    """
    if forecast is None or not forecast.values:
        return None if last_value is None else (last_value,) * steps
    return tuple(forecast.value_at(start_s + k * step_s) or 0.0 for k in range(steps))
