"""SLO feedback for the epoch planner: which pools miss their SLO more than the goal allows.

DynamoLLM (§3, its re-configuration loops) and FREESH (§2.4, MIAD on served latency) both
close the loop on observed latency, not only on forecast load. The planner's capacity model
(profile rows) can be wrong for the load a pool really serves; a pool that misses SLOs while
its load is within its planned capacity is the evidence. :class:`SloFeedback` keeps, per
pool, the completions of the trailing window (one planner step) and reports a pool as short
when its misses are significantly above ``1 − goal``: a one-sided binomial test at
``SIGNIFICANCE``, so the ≈ 1 % of misses a pool at the goal shows by chance does not trigger
it, while a real shortfall does within seconds. It also reports the pool's load in the
planner's own unit (Σ over classes of the peak ``bin_s`` QPS, FREESH §2.5), the load at
which the plan missed.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

import numpy as np

from shared.metrics.latency import SLO_WINDOW_FACTOR

if TYPE_CHECKING:
    from loadgen.simulator.cluster import ClusterSimulator
    from loadgen.simulator.instance import RequestState

__all__ = ["SIGNIFICANCE", "SloFeedback", "binomial_tail"]

Entry = tuple[float, float, str, bool]
"""One completion: finish time, arrival time, class, whether it missed its SLO."""

SIGNIFICANCE: Final = 0.01
"""One-sided test level: the chance that a pool exactly at the goal is reported short."""


def binomial_tail(misses: int, requests: int, rate: float) -> float:
    """P(X ≥ misses) for X ~ Binomial(requests, rate), summed in log space."""
    if misses <= 0:
        return 1.0
    if misses > requests:
        return 0.0
    if rate <= 0.0:
        return 0.0
    log_p, log_q = math.log(rate), math.log1p(-rate)
    below = 0.0
    for k in range(misses):
        log_term = (
            math.lgamma(requests + 1)
            - math.lgamma(k + 1)
            - math.lgamma(requests - k + 1)
            + k * log_p
            + (requests - k) * log_q
        )
        below += math.exp(log_term)
    return max(0.0, 1.0 - below)


class SloFeedback:
    """Completions per pool over a trailing window, judged against the SLO goal."""

    def __init__(
        self,
        sim: ClusterSimulator,
        window_s: float,
        bin_s: float = 5.0,
        *,
        coincident: bool = False,
    ) -> None:
        """Judge ``sim``'s pools over the last ``window_s``; peaks over ``bin_s`` bins.

        ``coincident``: a class's peak is its share of the window's arrivals times the peak
        bin rate of all of them (the planner's coincident demand), else its own peak.
        """
        self._sim = sim
        self._coincident = coincident
        self._window_s = window_s
        self._bin_s = bin_s
        self._goal = sim.policy.scaler.slo_goal
        self._min_requests = sim.policy.scaler.min_window_requests
        self._done: dict[str, deque[Entry]] = defaultdict(deque)

    def add(self, state: RequestState) -> None:
        """A completion: did it meet its class SLO (TTFT, TBT, and E2E ≤ 5·Lat)?"""
        slo = self._sim.slos.get(state.request_class)
        ttft = state.first_s - state.arrival_s
        tbt = (state.last_s - state.first_s) / (state.tokens - 1) if state.tokens > 1 else 0.0
        missed = state.last_s - state.arrival_s > SLO_WINDOW_FACTOR * state.lat_s
        if slo is not None:
            missed |= ttft > slo.ttft_ms / 1e3 or tbt > slo.tbt_ms / 1e3
        self._done[state.pool].append((state.last_s, state.arrival_s, state.request_class, missed))

    def clear(self) -> None:
        """Forget every window (a new plan is judged on its own completions)."""
        self._done.clear()

    def _prune(self, t_s: float) -> None:
        for window in self._done.values():
            while window and window[0][0] < t_s - self._window_s:
                window.popleft()

    def overloaded(self, t_s: float) -> dict[str, float]:
        """Pools whose window misses significantly more than the goal, with their load."""
        self._prune(t_s)
        out: dict[str, float] = {}
        for pool, window in self._done.items():
            requests = len(window)
            if requests < self._min_requests:
                continue
            misses = sum(1 for entry in window if entry[3])
            if binomial_tail(misses, requests, 1.0 - self._goal) < SIGNIFICANCE:
                out[pool] = sum(self._peaks(window, t_s).values())
        return out

    def peaks(self, t_s: float) -> dict[str, float]:
        """Peak ``bin_s`` QPS per class over every pool's window (arrival times)."""
        self._prune(t_s)
        return self._peaks([e for w in self._done.values() for e in w], t_s)

    def _peaks(self, entries: Iterable[Entry], t_s: float) -> dict[str, float]:
        by_class: dict[str, list[float]] = defaultdict(list)
        for _, arrival, cls, _ in entries:
            by_class[cls].append(arrival)
        start = t_s - self._window_s
        edges = np.arange(start, t_s + self._bin_s, self._bin_s)
        if self._coincident and by_class:
            every = [a for times in by_class.values() for a in times]
            peak = float(np.histogram(every, bins=edges)[0].max()) / self._bin_s
            return {cls: peak * len(times) / len(every) for cls, times in by_class.items()}
        return {
            cls: float(np.histogram(times, bins=edges)[0].max()) / self._bin_s
            for cls, times in by_class.items()
        }
