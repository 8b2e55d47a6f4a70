"""What the live agent needs to run DynamoLLM's instance manager (``dvfs.mode = "profile"``).

DynamoLLM (seed 001 §3.1) profiles each model's request classes before deployment. The live
agent does not know in advance which lengths a worker will serve, so it learns them: it keeps
the prompt and output lengths of the completions its node's workers report per engine
(GPU, model, TP and batch limit, from the worker's stats), and once ``min_requests`` have
been seen sweeps a profile with them on the engine simulator
(:func:`services.dvfs.profile_build.build_profile_table`, 0.4–2 s, in a thread) and keeps
it for the life of the process.

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
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from proto.messages import WorkerStats
from services.classifier.classes import ClassSLO
from services.dvfs.background_builds import BackgroundBuilds
from services.dvfs.profile_build import profile_of_lengths
from services.dvfs.profile_policy import (
    DEFAULT_EMERGENCY_SHARE,
    ProfilePolicy,
    ProfilePolicyConfig,
    ProfileTable,
)
from shared.engine import EngineConfig

__all__ = [
    "LoadMeter",
    "ProfileBook",
    "live_profile_policy",
    "profile_key",
    "simulator_profile",
]

EngineKey = tuple[str, str, int, int]
"""(GPU, model, TP, batch limit) of a worker: the profile is of the engine that serves, its
configured ``max_num_seqs`` included (``WorkerStats.engine_limit``, not the gate-lowered one)."""
MAX_SAMPLES = 4096
"""Lengths kept per engine: enough for the profile's draws, bounded for a long-lived agent."""


@dataclass(slots=True)
class _Lengths:
    prompts: deque[int] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    outputs: deque[int] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    classes: set[str] = field(default_factory=set)


def profile_key(stats: WorkerStats) -> EngineKey:
    """The engine a worker's stats describe, as far as its profile depends on it."""
    return (stats.gpu, stats.model, stats.tp, stats.engine_limit)


def simulator_profile(
    key: EngineKey, prompts: tuple[int, ...], outputs: tuple[int, ...]
) -> ProfileTable:
    """Sweep the engine simulator of ``key`` with these lengths (DynamoLLM §3.1)."""
    gpu, model, tp, max_num_seqs = key
    config = EngineConfig(gpu=gpu, model=model, tp=tp, max_num_seqs=max_num_seqs)
    return profile_of_lengths(config, prompts, outputs, partition="live", name="served")


class ProfileBook:
    """Per engine: the lengths served so far, then the profile swept with them."""

    def __init__(
        self,
        min_requests: int,
        build: Callable[[EngineKey, tuple[int, ...], tuple[int, ...]], ProfileTable] = (
            simulator_profile
        ),
    ) -> None:
        """Sweep once ``min_requests`` completions of an engine have been seen."""
        self._min = max(1, min_requests)
        self._build = build
        self._lengths: dict[EngineKey, _Lengths] = defaultdict(_Lengths)
        self._tables: BackgroundBuilds[EngineKey, ProfileTable] = BackgroundBuilds("the profile")

    def add(self, key: EngineKey, request_class: str, prompt: int, output: int) -> None:
        """Record one completion's lengths and class."""
        lengths = self._lengths[key]
        lengths.prompts.append(prompt)
        lengths.outputs.append(max(1, output))
        lengths.classes.add(request_class)

    def classes(self, key: EngineKey) -> frozenset[str]:
        """The request classes an engine has served."""
        return frozenset(self._lengths[key].classes)

    def get(self, key: EngineKey) -> ProfileTable | None:
        """The engine's profile, or None while too few lengths are known or it is swept."""
        lengths = self._lengths.get(key)
        sweep = None
        if lengths is not None and len(lengths.prompts) >= self._min:
            prompts, outputs = tuple(lengths.prompts), tuple(lengths.outputs)
            sweep = functools.partial(self._build, key, prompts, outputs)
        return self._tables.get(key, sweep)

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
