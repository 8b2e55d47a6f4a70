"""SLO feedback for the planner: which pools miss their SLO, and how much capacity to add.

DynamoLLM (§3, its re-configuration loops) and FREESH (§2.4, MIAD on served latency) both
close the loop on observed latency, not only on forecast load. The planner's capacity model
(profile rows) can be wrong for the load a pool really serves; a pool that misses SLOs while
its load is within its planned capacity is the evidence.

:class:`MissWindow` keeps, per pool, the completions of the trailing window (one planner
step) and reports a pool as short when its misses are significantly above ``1 − goal``: a
one-sided binomial test at :data:`SIGNIFICANCE`, so the ≈ 1 % of misses a pool at the goal
shows by chance does not trigger it, while a real shortfall does within seconds. It also
reports the pool's load in the planner's own unit (Σ over classes of the peak ``bin_s`` QPS,
FREESH §2.5), the load at which the plan missed.

:class:`CapacityFeedback` turns those reports into what the next solve sees: a de-rating of
the pool's profiled capacity, cut by at most ``step`` per report and never below ``floor``
(with a backlog the window's arrival peaks understate the load, and an unbounded cut spirals
down to a few per cent of the profile: measured on the ``code`` trace, docs/simulator.md
"SLO feedback"), and a clock boost: a pool that missed runs at its maximum clock for one
step, which restores capacity at once while a re-plan's instances take their start time.

Pure: the live planner (``request.done``) and the simulator (its completions) feed it.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from shared.domain.classes import ClassSLO
from shared.metrics.latency import SLO_WINDOW_FACTOR

__all__ = [
    "SIGNIFICANCE",
    "CapacityFeedback",
    "FeedbackSettings",
    "MissWindow",
    "binomial_tail",
    "growth_hosts",
    "missed_slo",
]

Entry = tuple[float, float, str, bool]
"""One completion: finish time, arrival time, class, whether it missed its SLO."""

SIGNIFICANCE: Final = 0.01
"""One-sided test level: the chance that a pool exactly at the goal is reported short."""


def growth_hosts(
    pool: str,
    modes: Mapping[str, Hashable],
    room: Mapping[str, int],
    order: Sequence[str] = (),
) -> tuple[str, ...]:
    """Where one more instance for ``pool`` can go: ``pool`` itself while it has ``room``
    (instances that fit now), else the pools of its mode (``modes``: GPU type, TP and class
    group, whatever makes an instance's capacity the same) that have room, in ``order``
    (e.g. the plan's least-carbon order), then by name. Another region's pool of the same
    mode takes a share of the short pool's classes, so an instance goes there only where
    the short pool's own region is full."""
    if room.get(pool, 0) > 0:
        return (pool,)
    if pool not in modes:
        return ()
    rank = {pid: k for k, pid in enumerate(order)}
    same = [
        pid
        for pid, mode in modes.items()
        if pid != pool and mode == modes.get(pool) and room.get(pid, 0) > 0
    ]
    return tuple(sorted(same, key=lambda pid: (rank.get(pid, len(rank)), pid)))


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


def missed_slo(
    *,
    arrival_s: float,
    first_s: float,
    last_s: float,
    tokens: int,
    lat_s: float,
    slo: ClassSLO | None,
) -> bool:
    """Whether a completion missed its class SLO: TTFT or mean TBT over the class's limits,
    or E2E over 5·Lat (FREESH Eq. 10). Times in one clock (model seconds); ``slo`` ``None``:
    only the E2E window judges (a class without limits)."""
    tbt = (last_s - first_s) / (tokens - 1) if tokens > 1 else 0.0
    missed = lat_s > 0 and last_s - arrival_s > SLO_WINDOW_FACTOR * lat_s
    if slo is not None:
        missed |= first_s - arrival_s > slo.ttft_ms / 1e3 or tbt > slo.tbt_ms / 1e3
    return missed


class MissWindow:
    """Completions per pool over a trailing window, judged against the SLO goal."""

    def __init__(
        self,
        window_s: float,
        *,
        goal: float,
        min_requests: int,
        bin_s: float = 5.0,
        coincident: bool = False,
    ) -> None:
        """Judge pools over the last ``window_s`` at ``goal``; peaks over ``bin_s`` bins.

        ``min_requests``: completions a window needs before its miss rate is trusted.
        ``coincident``: a class's peak is its share of the window's arrivals times the peak
        bin rate of all of them (the planner's coincident demand), else its own peak.
        """
        self._coincident = coincident
        self._window_s = window_s
        self._bin_s = bin_s
        self._goal = goal
        self._min_requests = min_requests
        self._done: dict[str, deque[Entry]] = defaultdict(deque)

    def add(
        self, pool: str, *, finish_s: float, arrival_s: float, request_class: str, missed: bool
    ) -> None:
        """One completion of ``pool``."""
        self._done[pool].append((finish_s, arrival_s, request_class, missed))

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
        return {
            pool: sum(self._peaks(window, t_s).values())
            for pool, window in self._done.items()
            if self._short(window)
        }

    def _short(self, entries: Sequence[Entry]) -> bool:
        """Enough completions, and their misses significantly above ``1 − goal``."""
        if len(entries) < self._min_requests:
            return False
        misses = sum(1 for entry in entries if entry[3])
        return binomial_tail(misses, len(entries), 1.0 - self._goal) < SIGNIFICANCE

    def short_since(self, pool: str, since_s: float, t_s: float) -> bool:
        """Whether ``pool``'s completions of requests that arrived from ``since_s`` on miss
        significantly more than the goal allows (the test of :meth:`overloaded`)."""
        self._prune(t_s)
        return self._short([entry for entry in self._done.get(pool, ()) if entry[1] >= since_s])

    def load(self, pool: str, t_s: float) -> float:
        """``pool``'s load over the window in the planner's unit: Σ over classes of the peak
        ``bin_s`` QPS of its requests' arrivals (as :meth:`overloaded` reports it)."""
        self._prune(t_s)
        return sum(self._peaks(self._done.get(pool, ()), t_s).values())

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


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackSettings:
    """How a miss report changes the next plan (``PlannerSettings.feedback_*``)."""

    step: float | None = 0.8
    """The most one report cuts a pool's capacity (a factor; the reactive scaler's
    multiplicative decrease); ``None``: down to the load it missed at, however low."""
    floor: float = 0.3
    """The least capacity share feedback leaves a pool."""
    boost: bool = True
    """A pool that missed runs at its maximum clock for ``hold_s``."""
    replan: bool = True
    """A report also cuts the pool's capacity and asks for a re-plan; ``False``: only the
    clock boost (a re-plan moves instances between modes and groups, and its start-up
    time costs SLO itself: measured on code, docs/simulator.md "SLO feedback")."""
    grow_limit: int = 0
    """The most instances a pool that still misses at the maximum clock may get added for it
    before the next plan, one at a time: in the pool itself, or where its region is full in
    a pool of the same mode (GPU type, TP, class group) elsewhere. 0: none."""

    def __post_init__(self) -> None:
        if self.step is not None and not 0.0 < self.step <= 1.0:
            raise ValueError("feedback step must be in (0, 1]")
        if not 0.0 <= self.floor <= 1.0:
            raise ValueError("feedback floor must be in [0, 1]")
        if self.grow_limit < 0:
            raise ValueError("feedback grow limit must be >= 0")


@dataclass(slots=True)
class CapacityFeedback:
    """Per pool: the capacity share learned from misses, and until when its clock is boosted."""

    settings: FeedbackSettings
    derating: dict[str, float] = field(default_factory=dict)
    boost_until: dict[str, float] = field(default_factory=dict)
    extra: dict[str, int] = field(default_factory=dict)
    """Per short pool: instances added for it beyond the plan in force (:meth:`grow`)."""
    added: list[tuple[str, str]] = field(default_factory=list)
    """Each added instance: (the short pool, the pool that got it), oldest first."""
    judge_from: dict[str, float] = field(default_factory=dict)
    """Per boosted pool: the arrival time from which its misses say the boost (or the last
    added instance) was not enough."""

    def learn(
        self,
        overloaded: Mapping[str, float],
        planned: Mapping[str, float],
        t_s: float,
        hold_s: float,
    ) -> bool:
        """Take one report (pool → load it missed at) against the capacities the plan in
        force gave the pools; whether any pool was short (the planner then re-plans)."""
        step = self.settings.step
        if not self.settings.replan:
            for pool in overloaded:
                self._boost(pool, t_s, hold_s)
            return False
        for pool, load in overloaded.items():
            capacity = planned.get(pool, 0.0)
            if capacity > 0 and load < capacity:
                factor = load / capacity if step is None else max(step, load / capacity)
                self.derating[pool] = max(self.settings.floor, self.share(pool) * factor)
            self._boost(pool, t_s, hold_s)
        return bool(overloaded)

    def _boost(self, pool: str, t_s: float, hold_s: float) -> None:
        if not self.settings.boost:
            return
        if not self.boosted(pool, t_s):
            # The boost acts at once: misses of requests that arrive from now on are the
            # maximum clock's (live, MIAD's climb takes a few of its periods).
            self.judge_from[pool] = t_s
        self.boost_until[pool] = t_s + hold_s

    def grow(
        self,
        window: MissWindow,
        t_s: float,
        hosts: Mapping[str, Sequence[str]],
        planned: Mapping[str, float],
    ) -> list[tuple[str, str]]:
        """Pools that outgrew their plan and still miss at the maximum clock: their load
        over the window is above the capacity the plan gave them (``planned``, QPS in
        :meth:`MissWindow.load`'s unit), they are boosted, and their requests that arrived
        since the boost (or since the last added instance was ready) miss significantly
        more than the goal. A pool that misses within its planned load is a capacity model
        that is off, not a burst: it keeps the boost alone. Each, under the limit, gets one
        more instance in the first of its ``hosts`` (:func:`growth_hosts`); returns (short
        pool, host) pairs, also kept in :attr:`added`. The caller starts each and says when
        it is ready (:meth:`started`)."""
        grown: list[tuple[str, str]] = []
        for pool, since in sorted(self.judge_from.items()):
            # One instance per host per call: a host listed with room has room for one.
            where = [h for h in hosts.get(pool, ()) if h not in {g for _, g in grown}]
            if (
                where
                and window.load(pool, t_s) > planned.get(pool, math.inf)
                and self.boosted(pool, t_s)
                and since <= t_s
                and self.extra.get(pool, 0) < self.settings.grow_limit
                and window.short_since(pool, since, t_s)
            ):
                self.extra[pool] = self.extra.get(pool, 0) + 1
                grown.append((pool, where[0]))
        self.added.extend(grown)
        return grown

    def withdraw(self, pool: str, host: str) -> None:
        """The instance :meth:`grow` added for ``pool`` in ``host`` could not start (its
        GPUs went to another start meanwhile): forget it, so a later call may try again."""
        self.added.remove((pool, host))
        self.extra[pool] -= 1

    def started(self, pool: str, host: str, ready_s: float, hold_s: float) -> None:
        """The instance added for ``pool`` in ``host`` is ready at ``ready_s``: judge what
        arrives at ``pool`` from then on, and keep both at the maximum clock until then and
        a hold after."""
        self.judge_from[pool] = ready_s
        for boosted in {pool, host}:
            self.boost_until[boosted] = max(self.boost_until.get(boosted, 0.0), ready_s + hold_s)

    def expire(self, t_s: float) -> list[tuple[str, str]]:
        """Drop the instances added for pools no longer boosted (they met their SLO for a
        hold since the last miss report, or since their added instance was ready): the
        plan in force is enough again. Returns the dropped (short pool, host) pairs."""
        gone = [(short, host) for short, host in self.added if not self.boosted(short, t_s)]
        for short, _ in gone:
            self.extra[short] -= 1
        self.added = [pair for pair in self.added if pair not in gone]
        return gone

    def new_plan(self) -> None:
        """A plan is in force: it sized every pool for the load that missed, so the added
        instances are its to keep or drop."""
        self.extra.clear()
        self.added.clear()

    def share(self, pool: str) -> float:
        """The capacity share ``pool`` is planned at (1: as profiled)."""
        return self.derating.get(pool, 1.0)

    def boosted(self, pool: str, t_s: float) -> bool:
        """Whether ``pool`` missed within its hold: it runs at the maximum clock."""
        return self.boost_until.get(pool, -math.inf) > t_s

    def reset(self) -> None:
        """Forget what was learned (the profiles it was learned against were replaced)."""
        self.derating.clear()
        self.new_plan()
