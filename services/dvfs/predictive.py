"""Predictive clock control: the lowest clock that still meets TBT and every deadline.

throttLL'eM §3.3 (seed 002): project batch and KV over future iterations
(:mod:`shared.domain.projection`, Eq. 1–2), predict each iteration's throughput with the
learned IPS model (:mod:`services.dvfs.perf_model`), and binary-search the supported clocks
for the lowest one at which

- the mean projected time between tokens, mean(1 / T[j]) over the horizon, stays within
  the TBT SLO (throttLL'eM: 200 ms; GreenServe: the strictest class SLO the instance holds,
  see :func:`tbt_bound`), and
- every request's projected finish, now + T̂_R[l_i] with T̂_R the cumulative sum of 1/T
  (Eq. 3) and l_i its last iteration, lands before its deadline (Eq. 4).

A request that misses its deadline even at the maximum clock is "lost": throttLL'eM then
applies the maximum clock as best effort (``lost_policy="max_clock"``); ``"ignore"`` leaves
lost requests out of the check instead. The paper re-plans on every admission; here the
agent calls :meth:`PredictiveController.decide` every period, which sees new arrivals at the
next period at the latest. The IPS model must be monotone in clock (it is fitted with a
monotone constraint), which is what makes the binary search exact.

Two extensions of ours close the gap between the paper's projection and a loaded engine
(``docs/dvfs.md`` measures both):

- **Expected arrivals** (``arrival_window_s`` > 0): Eq. 1 assumes no request arrives
  during the horizon, so every projection has the batch draining, while at load new
  requests keep it full and their prefill chunks stretch decode iterations. The controller
  counts the requests that appeared in its observations over the last ``arrival_window_s``
  and adds that stream (rate, mean prompt, mean predicted output) to the projection
  (:func:`shared.domain.projection.with_arrivals`); the prefill budget then uses the same
  window's prompt rate. The requests of its first observation are the baseline, not
  arrivals (a controller started on a busy instance would otherwise take its whole batch
  for one period's arrivals and over-clock until they left the window).
- **Model margin** (``time_margin``): predicted iteration times are stretched by this
  share, e.g. the 95th percentile of the IPS model's relative time error on held-out
  profiler data (:attr:`services.dvfs.perf_model.ModelAccuracy.time_error_p95`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

from services.dvfs.controller import Observation, RequestState
from services.dvfs.perf_model import IpsPredictor, PrefillModel
from shared.domain.projection import (
    ExpectedArrivals,
    SegmentProjection,
    project_segments,
    with_arrivals,
)

__all__ = [
    "DEFAULT_ARRIVAL_WINDOW_S",
    "NO_PREFILL",
    "ArrivalStream",
    "PredictiveConfig",
    "PredictiveController",
    "PrefillBudget",
    "lowest_feasible_clock",
    "tbt_bound",
]

PrefillBudget = Callable[[float], tuple[float, float]]
"""Per clock: (factor stretching every decode iteration, seconds of queued prefill ahead)."""

NO_PREFILL: Final[PrefillBudget] = lambda _clock: (1.0, 0.0)  # noqa: E731
"""throttLL'eM as published: decode iterations only, prefill ignored."""

FloatArray = NDArray[np.float64]

DEFAULT_ARRIVAL_WINDOW_S: Final = 30.0
"""Window over which GreenServe's predictive control measures the arrival stream it
projects: the scale of the E2E SLOs (7–30 s), long enough for ~100–200 arrivals at the
benches' rates (rate error ~10 %), short enough to follow the trace's minute-scale swings."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictiveConfig:
    """Parameters of predictive control (defaults: throttLL'eM's SLOs)."""

    tbt_slo_s: float = 0.2
    """Mean time-between-tokens bound for requests that carry no class SLO of their own
    (throttLL'eM: 200 ms; FREESH Table 7: 150 ms)."""
    period_s: float = 1.0
    min_clock_mhz: float | None = None
    """Lowest clock the search may return; ``None``: the GPU's lowest supported clock."""
    deadline_margin_s: float = 0.0
    """Slack kept before every deadline (prefill of queued work, clock-switch delay)."""
    lost_policy: Literal["max_clock", "ignore"] = "max_clock"
    max_prefill_duty: float = 0.9
    """With a prefill model: a clock whose projected prefill share of GPU time exceeds this
    is infeasible (the queue would grow without bound)."""
    max_segments: int = 32
    """Horizon segments evaluated per probe (see :mod:`shared.domain.projection`)."""
    arrival_window_s: float = 0.0
    """Project the arrivals observed over this many seconds as a steady stream (our
    extension); 0 keeps throttLL'eM's no-arrival projection and the one-period prompt rate."""
    time_margin: float = 0.0
    """Share by which every predicted iteration time is stretched (model-error margin)."""

    def __post_init__(self) -> None:
        if self.tbt_slo_s <= 0.0 or self.period_s <= 0.0 or self.max_segments < 1:
            raise ValueError("tbt_slo_s, period_s and max_segments must be positive")
        if self.arrival_window_s < 0.0 or self.time_margin < 0.0:
            raise ValueError("arrival_window_s and time_margin must not be negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalStream:
    """Requests expected to keep arriving, as observed over the recent window."""

    rate_per_s: float
    prompt_tokens: float
    output_tokens: float
    block_size: int


_ARRIVAL_PASSES: Final = 2
"""Fixed-point passes for arrivals per iteration (= rate × the seconds per iteration they
themselves lengthen); the second pass moves the answer by well under 1 %."""


def _seconds_per_iteration(
    model: IpsPredictor,
    projection: SegmentProjection,
    clock_mhz: float,
    stretch: float,
    arrivals: ArrivalStream | None,
) -> FloatArray:
    clocks = np.full(projection.batch.size, clock_mhz)
    seconds = stretch / model.predict_ips(projection.batch, projection.kv_blocks, clocks)
    if arrivals is None or arrivals.rate_per_s <= 0.0:
        return seconds
    for _ in range(_ARRIVAL_PASSES):
        per_iteration = float(np.dot(seconds, projection.iterations)) / projection.horizon
        loaded = with_arrivals(
            projection,
            ExpectedArrivals(
                per_iteration=arrivals.rate_per_s * per_iteration,
                prompt_tokens=arrivals.prompt_tokens,
                output_tokens=arrivals.output_tokens,
            ),
            block_size=arrivals.block_size,
        )
        seconds = stretch / model.predict_ips(loaded.batch, loaded.kv_blocks, clocks)
    return seconds


def _project_times(
    model: IpsPredictor,
    projection: SegmentProjection,
    clock_mhz: float,
    prefill: PrefillBudget,
    arrivals: ArrivalStream | None = None,
    time_margin: float = 0.0,
) -> tuple[float, FloatArray]:
    """Return (projected mean TBT, per request projected seconds to its last token)."""
    stretch, backlog_s = prefill(clock_mhz)
    if not np.isfinite(stretch):
        return np.inf, np.full(projection.finish_iteration.size, np.inf)
    seconds_per_iteration = (1.0 + time_margin) * _seconds_per_iteration(
        model, projection, clock_mhz, stretch, arrivals
    )
    mean_tbt = float(np.dot(seconds_per_iteration, projection.iterations)) / projection.horizon
    elapsed = np.cumsum(np.repeat(seconds_per_iteration, projection.iterations))  # Eq. 3
    return mean_tbt, backlog_s + elapsed[projection.finish_iteration]


def tbt_bound(requests: Iterable[RequestState], default_s: float) -> float:
    """The TBT bound of a batch: the strictest SLO among the requests it holds.

    Every request in a continuous batch advances one token per iteration, so all of them
    see the same time between tokens; the batch meets each request's class SLO only if it
    meets the smallest. throttLL'eM has one SLO for all requests (``default_s``); a request
    that carries none (the dvfs bench's instance, an older worker) is held to it.
    """
    return min((r.tbt_slo_s or default_s for r in requests), default=default_s)


def lowest_feasible_clock(
    model: IpsPredictor,
    projection: SegmentProjection,
    slack_s: FloatArray,
    clocks_mhz: tuple[float, ...],
    *,
    tbt_slo_s: float,
    lost_policy: Literal["max_clock", "ignore"] = "max_clock",
    prefill: PrefillBudget = NO_PREFILL,
    arrivals: ArrivalStream | None = None,
    time_margin: float = 0.0,
) -> tuple[float, int]:
    """Binary-search ``clocks_mhz`` (ascending) for the lowest clock meeting the SLOs.

    Args:
        model: the IPS model.
        projection: the Eq. 1–2 projection of the instance's requests.
        slack_s: per request (projection order), seconds from now until its deadline.
        clocks_mhz: candidate clocks, ascending, not empty.
        tbt_slo_s: bound on the projected mean time between tokens.
        lost_policy: what to do with requests that miss even at the highest clock.
        prefill: per clock, how prefill work stretches decode and delays finishes.
        arrivals: requests expected to join during the horizon (``None``: none, as Eq. 1).
        time_margin: share added to every predicted iteration time.

    Returns:
        The chosen clock and the number of lost requests.
    """

    def times(clock: float) -> tuple[float, FloatArray]:
        return _project_times(model, projection, clock, prefill, arrivals, time_margin)

    mean_tbt, finish = times(clocks_mhz[-1])
    lost = finish > slack_s  # Eq. 4 fails even at the highest clock
    if mean_tbt > tbt_slo_s or (lost.any() and lost_policy == "max_clock"):
        return clocks_mhz[-1], int(lost.sum())
    keep = ~lost

    def feasible(clock: float) -> bool:
        tbt, done = times(clock)
        return tbt <= tbt_slo_s and bool((done[keep] <= slack_s[keep]).all())

    low, high = 0, len(clocks_mhz) - 1  # invariant: clocks_mhz[high] is feasible
    while low < high:
        middle = (low + high) // 2
        if feasible(clocks_mhz[middle]):
            high = middle
        else:
            low = middle + 1
    return clocks_mhz[high], int(lost.sum())


class PredictiveController:
    """throttLL'eM's throttling controller on one instance; see the module docstring."""

    def __init__(
        self,
        model: IpsPredictor,
        config: PredictiveConfig | None = None,
        *,
        prefill: PrefillModel | None = None,
    ) -> None:
        """Use ``model`` (fitted for this instance's GPU, model and TP) to predict IPS.

        Args:
            model: the decode IPS model.
            config: SLOs and search options.
            prefill: optional prefill cost model (our extension): when given, the GPU
                share that arriving prompts take stretches every decode iteration, and
                the prompts of queued requests delay every finish.
        """
        self._model = model
        self._config = config or PredictiveConfig()
        self._prefill = prefill
        self._lost = 0
        self._present: set[str] = set()
        """Request ids of the last observation (a new id is an arrival)."""
        self._arrived: deque[tuple[float, int, int]] = deque()
        """(time seen, prompt tokens, predicted output tokens) of recent arrivals."""
        self._first_seen_s: float | None = None
        """Time of the first observation (the baseline); arrivals are counted from it."""
        self._stream: ArrivalStream | None = None
        """The arrival stream of the last decision (what admission projects)."""

    @property
    def config(self) -> PredictiveConfig:
        """The controller's parameters."""
        return self._config

    @property
    def period_s(self) -> float:
        """How often the agent re-plans."""
        return self._config.period_s

    @property
    def lost_requests(self) -> int:
        """Requests found unable to meet their deadline at the last decision."""
        return self._lost

    def decide(self, observation: Observation) -> float:
        """Return the lowest supported clock that meets TBT and every deadline."""
        cfg = self._config
        floor = cfg.min_clock_mhz if cfg.min_clock_mhz is not None else 0.0
        clocks = tuple(c for c in observation.supported_clocks_mhz if c >= floor)
        clocks = clocks or (observation.max_clock_mhz,)
        stream = self._stream = self._observe_arrivals(observation)
        if not observation.requests:
            self._lost = 0
            return clocks[0]
        projection = project_segments(
            observation.requests,
            block_size=observation.block_size,
            max_segments=cfg.max_segments,
        )
        start = observation.now_s + cfg.deadline_margin_s
        slack = np.fromiter(
            (r.deadline_s - start for r in observation.requests),
            np.float64,
            len(observation.requests),
        )
        clock, self._lost = lowest_feasible_clock(
            self._model,
            projection,
            slack,
            clocks,
            tbt_slo_s=tbt_bound(observation.requests, cfg.tbt_slo_s),
            lost_policy=cfg.lost_policy,
            prefill=self._prefill_budget(observation, stream),
            arrivals=stream,
            time_margin=cfg.time_margin,
        )
        return clock

    def admits(self, observation: Observation, candidate: RequestState) -> bool:
        """throttLL'eM §3.2 admission: may ``candidate`` join without breaking a deadline?

        The candidate is added virtually and the instance projected at the highest clock
        (with this controller's prefill budget, arrival stream and margin): it is refused
        while the projected KV exceeds the cache, the mean TBT exceeds the SLO, or a request
        that meets its deadline without it would miss with it. A candidate that only misses
        its own deadline is admitted (the paper's "lost" request).
        """
        if not observation.requests:
            return True
        cfg = self._config
        top = observation.max_clock_mhz
        stream = self._stream
        budget = self._prefill_budget(observation, stream)
        start = observation.now_s + cfg.deadline_margin_s

        def finishes(requests: tuple[RequestState, ...]) -> tuple[float, FloatArray, float]:
            projection = project_segments(
                requests, block_size=observation.block_size, max_segments=cfg.max_segments
            )
            tbt, done = _project_times(
                self._model, projection, top, budget, stream, cfg.time_margin
            )
            return tbt, done, float(projection.kv_blocks.max())

        present = tuple(observation.requests)
        slack = np.fromiter((r.deadline_s - start for r in present), np.float64, len(present))
        _, alone, _ = finishes(present)
        tbt, joint, kv = finishes((*present, candidate))
        if kv > observation.kv_blocks_total or tbt > tbt_bound(
            (*present, candidate), cfg.tbt_slo_s
        ):
            return False
        keep = alone <= slack  # requests already lost stay out of the check
        return bool((joint[:-1][keep] <= slack[keep]).all())

    def _observe_arrivals(self, observation: Observation) -> ArrivalStream | None:
        """Record requests not seen before; return the window's stream (None when off).

        An arrival is a request id absent from the previous observation. The requests of
        the first observation are the baseline, not arrivals: the first decision sees no
        stream, and the rate is counted over the time since that observation (at most the
        window), never less than one period.
        """
        window = self._config.arrival_window_s
        if window <= 0.0:
            return None
        now = observation.now_s
        present = {r.request_id for r in observation.requests}
        if self._first_seen_s is None:
            # The first observation is the baseline: its requests arrived at unknown times
            # before this controller started (on a busy instance, up to a whole window of
            # them), so they are not one period's arrivals; the window opens now.
            self._first_seen_s = now
            self._present = present
        for r in observation.requests:
            if r.request_id not in self._present:
                output = r.generated_tokens + r.predicted_remaining_tokens
                self._arrived.append((now, r.prompt_tokens, output))
        self._present = present
        while self._arrived and self._arrived[0][0] <= now - window:
            self._arrived.popleft()
        span = min(window, max(now - self._first_seen_s, self._config.period_s))
        if not self._arrived:
            return ArrivalStream(
                rate_per_s=0.0,
                prompt_tokens=0.0,
                output_tokens=0.0,
                block_size=observation.block_size,
            )
        count = len(self._arrived)
        return ArrivalStream(
            rate_per_s=count / span,
            prompt_tokens=sum(a[1] for a in self._arrived) / count,
            output_tokens=sum(a[2] for a in self._arrived) / count,
            block_size=observation.block_size,
        )

    def _prefill_budget(
        self, observation: Observation, stream: ArrivalStream | None
    ) -> PrefillBudget:
        prefill = self._prefill
        if prefill is None:
            return NO_PREFILL
        queued = sum(r.prompt_tokens for r in observation.requests if not r.running)
        rate = (
            observation.prompt_tokens_per_s
            if stream is None
            else stream.rate_per_s * stream.prompt_tokens
        )
        limit = self._config.max_prefill_duty

        def budget(clock: float) -> tuple[float, float]:
            per_token = prefill.at(clock)
            duty = rate * per_token
            if duty >= limit:
                return np.inf, np.inf
            return 1.0 / (1.0 - duty), queued * per_token

        return budget
