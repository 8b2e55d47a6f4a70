"""What the live agent needs to run DynamoLLM's instance manager (``dvfs.mode = "profile"``).

DynamoLLM (seed 001 §3.1) profiles each model's request classes before deployment. The live
agent does not know in advance which lengths a worker will serve, so it learns them: it keeps
the prompt and output lengths of the completions its node's workers report per engine
(GPU, model, TP and batch limit, from the worker's stats), and once ``min_requests`` have
been seen sweeps a profile with them on the engine simulator
(:func:`services.dvfs.profile_build.build_profile_table`, 0.4–2 s, in a thread). Every
``drift_window`` completions after that it tests the latest window's lengths against the
ones the profile was swept with (:mod:`services.dvfs.profile_drift`) and, when the mix has
moved, sweeps again with the window's completions after the change point inside it
(:func:`services.dvfs.profile_drift.change_point`; when fewer than ``min_requests`` came
after it, once that many have); the old profile serves until the new one is ready.

The instance manager's load is requests per second over DynamoLLM's 5-s window (model time).
The agent sees completions, not arrivals, so it counts completions: the same rate in a
steady state, late by one E2E in a burst, which the emergency step (maximum clock after a
request came near its class's bound) covers.

SLOs: a worker serves several classes, and the profile's P99 TTFT is of their mix, set by the
longest prompts; the filter therefore holds it to the loosest TTFT SLO among the classes
the worker served, and the TBT to the strictest (a batch gives all its requests the same
gap); each class's own TTFT and TBT bounds drive the emergency.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from proto.messages import WorkerStats
from services.dvfs.background_builds import BackgroundBuilds, Builds
from services.dvfs.profile_build import profile_of_lengths
from services.dvfs.profile_drift import DRIFT_ALPHA, change_point, length_drift
from services.dvfs.profile_policy import (
    DEFAULT_EMERGENCY_SHARE,
    ProfilePolicy,
    ProfilePolicyConfig,
    ProfileTable,
)
from shared.domain.classes import ClassSLO
from shared.engine import EngineConfig

__all__ = [
    "DEFAULT_DRIFT_WINDOW",
    "LoadMeter",
    "ProfileBook",
    "ProfileControllers",
    "engine_key",
    "live_profile_policy",
    "simulator_profile",
]

EngineKey = tuple[str, str, int, int]
"""(GPU, model, TP, batch limit) of a worker: the profile is of the engine that serves, its
configured ``max_num_seqs`` included (``WorkerStats.engine_limit``, not the gate-lowered one)."""
MAX_SAMPLES = 4096
"""Lengths kept per engine: enough for the profile's draws, bounded for a long-lived agent."""
DEFAULT_DRIFT_WINDOW = 256
"""Completions per drift test: enough for the KS test to see a change of mix (critical
statistic 0.13–0.27 against a 64–4,096-length profile), few enough to react within a minute
at tens of requests per second."""

logger = logging.getLogger(__name__)

Served = tuple[str, int, int]
"""(class, prompt tokens, output tokens) of one completion."""


@dataclass(slots=True)
class _Lengths:
    served: deque[Served] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    """Completions since the profile's sample began (all of them before the first sweep)."""
    swept: tuple[Served, ...] = ()
    """What the current (or the sweeping) profile was swept with."""
    fresh: int = 0
    """Completions since the last sweep or drift test."""
    classes: set[str] = field(default_factory=set)
    """Classes served since the profile's sample began."""
    resweep_due: bool = False
    """The mix changed too late in the window that saw it to sweep with only what came
    after: the sweep waits until ``served`` holds enough of the new mix."""


def _columns(rows: Sequence[Served]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prompts, outputs) of served rows."""
    return tuple(p for _, p, _ in rows), tuple(o for _, _, o in rows)


def _after_change(window: tuple[Served, ...], alpha: float) -> tuple[Served, ...]:
    """The completions of ``window`` after the change of mix inside it, or all of them when
    no split is significant (the change came before the window: all of it is new)."""
    split = change_point(*_columns(window), alpha=alpha)
    return window[split.index :] if split is not None and split.significant else window


def engine_key(stats: WorkerStats) -> EngineKey:
    """The engine a worker's stats describe, as far as its profile and its predictive models
    depend on it."""
    return (stats.gpu, stats.model, stats.tp, stats.engine_limit)


def engine_config(key: EngineKey) -> EngineConfig:
    """The engine model's configuration of the engine ``key`` names."""
    gpu, model, tp, max_num_seqs = key
    return EngineConfig(gpu=gpu, model=model, tp=tp, max_num_seqs=max_num_seqs)


def simulator_profile(
    key: EngineKey, prompts: tuple[int, ...], outputs: tuple[int, ...]
) -> ProfileTable:
    """Sweep the engine simulator of ``key`` with these lengths (DynamoLLM §3.1)."""
    return profile_of_lengths(engine_config(key), prompts, outputs, partition="live", name="served")


class ProfileBook:
    """Per engine: the lengths served, the profile swept with them, and again on drift."""

    def __init__(
        self,
        min_requests: int,
        build: Callable[[EngineKey, tuple[int, ...], tuple[int, ...]], ProfileTable] = (
            simulator_profile
        ),
        *,
        drift_window: int = DEFAULT_DRIFT_WINDOW,
        drift_alpha: float = DRIFT_ALPHA,
        builds: Builds[EngineKey, ProfileTable] | None = None,
        on_sweep: Callable[[EngineKey, str], None] | None = None,
    ) -> None:
        """Sweep once ``min_requests`` completions of an engine have been seen, then test
        every ``drift_window`` completions (0: never) and sweep again when the mix moved.

        ``builds`` runs the sweeps (default: a worker thread each); ``on_sweep`` hears of
        each sweep started, with its reason (``first`` or ``drift``).
        """
        self._min = max(1, min_requests)
        self._build = build
        self._window = max(0, drift_window)
        self._alpha = drift_alpha
        self._lengths: dict[EngineKey, _Lengths] = defaultdict(_Lengths)
        self._tables: Builds[EngineKey, ProfileTable] = builds or BackgroundBuilds("the profile")
        self._on_sweep = on_sweep or (lambda key, reason: None)
        self.resweeps = 0
        """Sweeps started because the served mix drifted."""

    def add(self, key: EngineKey, request_class: str, prompt: int, output: int) -> None:
        """Record one completion's lengths and class."""
        lengths = self._lengths[key]
        lengths.served.append((request_class, prompt, max(1, output)))
        lengths.classes.add(request_class)
        lengths.fresh += 1

    def classes(self, key: EngineKey) -> frozenset[str]:
        """The request classes an engine has served since its profile's sample began."""
        return frozenset(self._lengths[key].classes)

    def get(self, key: EngineKey) -> ProfileTable | None:
        """The engine's profile, or None while too few lengths are known or it is swept;
        starts a sweep when there are enough, and a new one when the mix has drifted."""
        lengths = self._lengths.get(key)
        if lengths is None:
            return None
        if not lengths.swept:
            if len(lengths.served) < self._min:
                return None
            lengths.swept, lengths.fresh = tuple(lengths.served), 0
            self._on_sweep(key, "first")
            return self._tables.get(key, self._sweep(key, lengths.swept))
        # Passing the sweep again retries one that failed; a built or running one is kept.
        table = self._tables.get(key, self._sweep(key, lengths.swept))
        if lengths.resweep_due:
            if len(lengths.served) >= self._min:
                table = self._resweep(key, lengths, tuple(lengths.served))
        elif self._window and lengths.fresh >= self._window:
            lengths.fresh = 0
            recent = tuple(lengths.served)[-self._window :]
            drift = length_drift(_columns(lengths.swept), _columns(recent), self._alpha)
            if drift.drifted:
                self.resweeps += 1
                self._on_sweep(key, "drift")
                newer = _after_change(recent, self._alpha)
                logger.info(
                    "served lengths of %s drifted (KS prompt %.2f, output %.2f > %.2f): "
                    "sweeping its profile again with the last %d of %d completions",
                    key, drift.prompt_d, drift.output_d, drift.critical, len(newer),
                    len(recent),
                )  # fmt: skip
                if len(newer) >= self._min:
                    table = self._resweep(key, lengths, newer)
                else:
                    lengths.served = deque(newer, maxlen=MAX_SAMPLES)
                    lengths.resweep_due = True
        return table

    def _resweep(
        self, key: EngineKey, lengths: _Lengths, rows: tuple[Served, ...]
    ) -> ProfileTable | None:
        """Sweep again with ``rows``, the served mix since the change; the old profile
        serves until the new one is built."""
        lengths.served = deque(rows, maxlen=MAX_SAMPLES)
        lengths.swept = rows
        lengths.fresh = 0
        lengths.resweep_due = False
        lengths.classes = {name for name, _, _ in rows}
        self._tables.rebuild(key, self._sweep(key, rows))
        return self._tables.get(key, None)

    def _sweep(self, key: EngineKey, rows: Sequence[Served]) -> Callable[[], ProfileTable]:
        prompts, outputs = _columns(rows)
        return functools.partial(self._build, key, prompts, outputs)

    def close(self) -> None:
        """Cancel sweeps still running."""
        self._tables.close()


class LoadMeter:
    """Completions per second over a sliding window, per worker (model time)."""

    def __init__(self, window_s: float) -> None:
        """Count over the last ``window_s`` model seconds."""
        self._window_s = window_s
        self._done: dict[str, deque[float]] = defaultdict(deque)

    def add(self, worker_id: str, at_s: float) -> None:
        """Record one completion at model time ``at_s``."""
        self._done[worker_id].append(at_s)

    def rate(self, worker_id: str, now_s: float) -> float:
        """Completions per model second over the window ending at ``now_s``."""
        done = self._done.get(worker_id)
        if done is None:
            return 0.0
        while done and done[0] <= now_s - self._window_s:
            done.popleft()
        return len(done) / self._window_s


def live_profile_policy(
    table: ProfileTable,
    slos: Mapping[str, ClassSLO],
    served: frozenset[str],
    *,
    period_s: float,
    emergency_share: float = DEFAULT_EMERGENCY_SHARE,
) -> ProfilePolicy:
    """The instance manager for a worker that served the classes ``served``.

    Raises:
        ValueError: when none of ``served`` has an SLO in ``slos``.
    """
    known = [slos[name] for name in sorted(served) if name in slos]
    if not known:
        raise ValueError(f"no SLO for any of the classes {sorted(served)}")
    config = ProfilePolicyConfig(
        ttft_slo_s=max(s.ttft_ms for s in known) / 1000.0,
        tbt_slo_s=min(s.tbt_ms for s in known) / 1000.0,
        period_s=period_s,
        emergency_share=emergency_share,
        class_bounds={name: (s.ttft_ms / 1000.0, s.tbt_ms / 1000.0) for name, s in slos.items()},
    )
    return ProfilePolicy(table, config)


class ProfileControllers:
    """Per worker: the instance manager built from its engine's current profile and served
    classes, rebuilt when a re-sweep (the mix drifted) or a new class changes either.

    The policy keeps no state between periods, so a rebuild loses nothing.
    """

    def __init__(
        self,
        book: ProfileBook,
        slos: Mapping[str, ClassSLO],
        *,
        period_s: float,
        emergency_share: float = DEFAULT_EMERGENCY_SHARE,
    ) -> None:
        """Build from ``book``'s profiles under ``slos``."""
        self._book = book
        self._slos = slos
        self._period_s = period_s
        self._emergency_share = emergency_share
        self._built: dict[str, tuple[ProfilePolicy, ProfileTable, frozenset[str]]] = {}
        self.rebuilds = 0
        """Policies rebuilt after their first (new profile or new class)."""

    def get(self, worker_id: str, key: EngineKey) -> ProfilePolicy | None:
        """The worker's policy, or None while its engine has no profile yet."""
        table = self._book.get(key)
        if table is None:
            return None
        served = self._book.classes(key)
        built = self._built.get(worker_id)
        if built is not None and built[1] is table and built[2] == served:
            return built[0]
        if built is not None:
            self.rebuilds += 1
        policy = live_profile_policy(
            table, self._slos, served, period_s=self._period_s,
            emergency_share=self._emergency_share,
        )  # fmt: skip
        self._built[worker_id] = (policy, table, served)
        return policy
