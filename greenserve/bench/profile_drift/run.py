"""``greenserve bench profile-drift``: DynamoLLM's instance manager when the served mix changes.

DynamoLLM (seed 001 §3.1) profiles each request class before deployment. The live agent's
``profile`` mode learns the lengths from completions instead and sweeps the profile once it
has ``dvfs.profile_min_requests`` of them (:mod:`services.dvfs.profile_live`); when the mix a
worker serves changes afterwards, that profile describes requests it no longer serves. This
bench measures what that costs and what the agent's drift test (KS on prompt and output
lengths every ``dvfs.profile_drift_window`` completions, :mod:`services.dvfs.profile_drift`)
recovers, on one simulated instance (the live worker's engine: 64 sequences by default):

* two phases of ``--phase-minutes`` each, Poisson arrivals at ``--load-share`` of the phase
  mix's throughput bound at maximum clock (the bound the profile sweep measures), lengths
  drawn from the Azure conversation trace and the Azure code trace, in both orders;
* each request's class and SLO from the classifier's scheme (DynamoLLM: TTFT 250/400/2,000 ms
  by prompt, TBT 100 ms); late = TTFT or mean TBT over its class's bound;
* controllers: ``fixed-max``; ``swept-once`` (the live agent with drift testing off: one
  profile of the first lengths it saw); ``drift-resweep`` (the live agent's default);
  ``per-phase-profile`` (each phase's own profile from its first request, switched exactly
  at the boundary: what profiling each mix before deployment would give, the bound the
  learning agents are compared with).

The learning controllers run the live agent's own ``ProfileBook``, ``ProfileControllers`` and
``LoadMeter`` (completions per 5 s), with the sweep done at once in model time
(``ImmediateBuilds``) where the live agent sweeps in a thread for 0.4–2 s of wall time.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
import pandas as pd

from greenserve.bench.profile_drift.options import HELP, NAME, add_arguments
from loadgen.instance_sim import Arrival, InstanceRun, run_instance
from services.dvfs.background_builds import ImmediateBuilds
from services.dvfs.controller import ClockController, FixedClockController, Observation
from services.dvfs.profile_build import ProfileGrid, profile_of_lengths
from services.dvfs.profile_live import (
    EngineKey,
    LoadMeter,
    ProfileBook,
    ProfileControllers,
    live_profile_policy,
    simulator_profile,
)
from services.dvfs.profile_policy import DYNAMOLLM_PERIOD_S, ProfilePolicy, ProfileTable
from shared.domain.classes import ClassScheme, ClassSLO, default_slos, scheme_by_name
from shared.engine import EngineConfig, create_engine
from shared.paths import data_path

__all__ = ["HELP", "NAME", "add_arguments", "run"]

MIXES: Final = {
    "conv": "AzureLLMInferenceTrace_conv.csv",
    "code": "AzureLLMInferenceTrace_code.csv",
}
ORDERS: Final = (("conv", "code"), ("code", "conv"))
MAX_CONTEXT_TOKENS: Final = 8192
WORKER: Final = "w"


@functools.cache
def _trace_lengths(mix: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    frame = pd.read_csv(data_path("traces", MIXES[mix]))
    prompts = frame["ContextTokens"].to_numpy(np.int64)
    outputs = frame["GeneratedTokens"].to_numpy(np.int64)
    fits = (prompts > 0) & (outputs > 0) & (prompts + outputs <= MAX_CONTEXT_TOKENS)
    return prompts[fits], outputs[fits]


@dataclass(frozen=True, slots=True)
class _Phase:
    mix: str
    start_s: float
    rate_rps: float
    profile: ProfileTable
    classes: frozenset[str]


def _phase_arrivals(
    mix: str, start_s: float, minutes: float, rate: float, scheme: ClassScheme, seed: int
) -> list[Arrival]:
    prompts, outputs = _trace_lengths(mix)
    rng = np.random.default_rng(seed)
    times = start_s + np.cumsum(rng.exponential(1.0 / rate, size=int(rate * minutes * 90) + 10))
    times = times[times < start_s + minutes * 60.0]
    draw = rng.integers(0, prompts.size, size=times.size)
    return [
        Arrival(request_id=f"{mix}-{i}", arrival_s=float(t), prompt_tokens=int(prompts[j]),
                output_tokens=int(outputs[j]),
                request_type=scheme.classify(int(prompts[j]), int(outputs[j])))
        for i, (t, j) in enumerate(zip(times, draw, strict=True))
    ]  # fmt: skip


class _Controller:
    """What both profile controllers share: DynamoLLM's period, the live agent's load (the
    completions of the last period) and a log of the clocks chosen."""

    def __init__(self) -> None:
        self._loads = LoadMeter(DYNAMOLLM_PERIOD_S)
        self.clocks: list[tuple[float, float]] = []

    @property
    def period_s(self) -> float:
        return DYNAMOLLM_PERIOD_S

    def _choose(self, policy: ProfilePolicy | None, observation: Observation) -> float:
        now = observation.now_s
        if policy is None:
            clock = observation.clock_mhz  # no profile yet: the clock is left alone
        else:
            rate = self._loads.rate(WORKER, now)
            clock = policy.decide(replace(observation, arrival_rate_rps=rate))
        self.clocks.append((now, clock))
        return clock

    def _count(self, observation: Observation) -> None:
        for _ in observation.finished:
            self._loads.add(WORKER, observation.now_s)


class _Learning(_Controller):
    """The live agent's profile mode on one instance: learn, sweep, re-sweep on drift."""

    def __init__(
        self, key: EngineKey, slos: Mapping[str, ClassSLO], *, min_requests: int, window: int
    ) -> None:
        super().__init__()
        self._key = key
        self.book = ProfileBook(min_requests, simulator_profile, drift_window=window,
                                builds=ImmediateBuilds())  # fmt: skip
        self._policies = ProfileControllers(self.book, slos, period_s=DYNAMOLLM_PERIOD_S)
        self.tables: list[tuple[float, int]] = []
        """(model time, profile's identity) whenever the policy's profile changed."""

    def decide(self, observation: Observation) -> float:
        self._count(observation)
        for request_class, prompt, output in observation.finished:
            self.book.add(self._key, request_class, prompt, output)
        policy = self._policies.get(WORKER, self._key)
        if policy is not None:
            table = id(policy.table)
            if not self.tables or self.tables[-1][1] != table:
                self.tables.append((observation.now_s, table))
        return self._choose(policy, observation)


class _PerPhase(_Controller):
    """Each phase's own profile from its first request (profiled before deployment)."""

    def __init__(self, phases: Sequence[_Phase], slos: Mapping[str, ClassSLO]) -> None:
        super().__init__()
        period = DYNAMOLLM_PERIOD_S
        self._phases = [
            (p.start_s, live_profile_policy(p.profile, slos, p.classes, period_s=period))
            for p in phases
        ]

    def decide(self, observation: Observation) -> float:
        self._count(observation)
        policy = [p for start, p in self._phases if start <= observation.now_s][-1]
        return self._choose(policy, observation)


@dataclass
class _Row:
    run: InstanceRun
    clocks: list[tuple[float, float]] = field(default_factory=list)
    resweeps: int | None = None
    resweep_after_s: float | None = None


def _late(
    run: InstanceRun, arrivals: Sequence[Arrival], slos: Mapping[str, ClassSLO]
) -> np.ndarray[Any, Any]:
    """Requests that missed their class's TTFT or mean-TBT bound, or did not finish."""
    cols = run.columns
    ttft = cols.first_token_s - cols.arrival_s
    gaps = np.maximum(cols.output_tokens - 1, 1)
    tbt = np.where(cols.output_tokens > 1, (cols.finish_s - cols.first_token_s) / gaps, 0.0)
    ttft_bound = np.array([slos[a.request_type].ttft_ms / 1e3 for a in arrivals])
    tbt_bound = np.array([slos[a.request_type].tbt_ms / 1e3 for a in arrivals])
    with np.errstate(invalid="ignore"):
        return ~cols.completed | (ttft > ttft_bound) | (tbt > tbt_bound)


def _pct(mask: np.ndarray[Any, Any]) -> float | None:
    return round(float(mask.mean() * 100.0), 2) if mask.size else None


def _phase_report(
    row: _Row,
    late: np.ndarray[Any, Any],
    late_at_max: np.ndarray[Any, Any],
    arrivals: Sequence[Arrival],
    phases: Sequence[_Phase],
) -> list[dict[str, Any]]:
    out = []
    arrival_s = np.array([a.arrival_s for a in arrivals])
    ends = [p.start_s for p in phases[1:]] + [np.inf]
    times = np.array([t for t, _ in row.clocks])
    decided = np.array([c for _, c in row.clocks])
    for phase, end in zip(phases, ends, strict=True):
        mine = (arrival_s >= phase.start_s) & (arrival_s < end)
        in_phase = (times >= phase.start_s) & (times < end)
        out.append({
            "mix": phase.mix,
            "rate_rps": round(phase.rate_rps, 3),
            "requests": int(mine.sum()),
            "late_pct": _pct(late[mine]),
            "late_on_time_at_max_clock_pct": _pct((late & ~late_at_max)[mine]),
            "mean_decided_clock_mhz": (
                round(float(decided[in_phase].mean()), 1) if in_phase.any() else None
            ),
        })  # fmt: skip
    return out


def _one_order(
    order: tuple[str, str],
    args: argparse.Namespace,
    config: EngineConfig,
    scheme: ClassScheme,
    slos: Mapping[str, ClassSLO],
    profiles: Mapping[str, ProfileTable],
) -> dict[str, Any]:
    top_share = ProfileGrid().load_shares[-1]
    phases: list[_Phase] = []
    arrivals: list[Arrival] = []
    start = 0.0
    for index, mix in enumerate(order):
        bound = profiles[mix].loads_rps[-1] / top_share
        rate = args.load_share * bound
        part = _phase_arrivals(mix, start, args.phase_minutes, rate, scheme, args.seed + index)
        phases.append(
            _Phase(mix, start, rate, profiles[mix], frozenset(a.request_type for a in part))
        )
        arrivals.extend(part)
        start += args.phase_minutes * 60.0
    key: EngineKey = (config.gpu, config.model, config.tp, config.max_num_seqs)
    rows: dict[str, _Row] = {}
    fixed = FixedClockController(period_s=DYNAMOLLM_PERIOD_S)
    learners = {
        "swept-once": _Learning(key, slos, min_requests=args.min_requests, window=0),
        "drift-resweep": _Learning(key, slos, min_requests=args.min_requests,
                                   window=args.drift_window),
    }  # fmt: skip
    per_phase = _PerPhase(phases, slos)
    controllers: dict[str, ClockController] = {"fixed-max": fixed, **learners,
                                               "per-phase-profile": per_phase}  # fmt: skip
    for name, controller in controllers.items():
        began = time.perf_counter()
        run_ = run_instance(create_engine(config), arrivals, controller)
        print(f"  {'→'.join(order)} {name}: {time.perf_counter() - began:.1f} s", file=sys.stderr)
        row = _Row(run_)
        if isinstance(controller, _Learning):
            row.clocks = controller.clocks
            row.resweeps = controller.book.resweeps
            later = [t for t, _ in controller.tables if t >= phases[1].start_s]
            row.resweep_after_s = round(later[0] - phases[1].start_s, 1) if later else None
        elif isinstance(controller, _PerPhase):
            row.clocks = controller.clocks
        rows[name] = row
    base = rows["fixed-max"].run.energy_j
    late_at_max = _late(rows["fixed-max"].run, arrivals, slos)
    report: dict[str, Any] = {"order": list(order), "requests": len(arrivals), "configs": {}}
    for name, row in rows.items():
        late = _late(row.run, arrivals, slos)
        report["configs"][name] = {
            "energy_wh": round(row.run.energy_j / 3600.0, 3),
            "energy_saving_pct": round((1.0 - row.run.energy_j / base) * 100.0, 2),
            "late_pct": _pct(late),
            "late_on_time_at_max_clock_pct": _pct(late & ~late_at_max),
            "phases": _phase_report(row, late, late_at_max, arrivals, phases),
            "resweeps": row.resweeps,
            "new_profile_after_change_s": row.resweep_after_s,
        }
    report["_clocks"] = {name: row.clocks for name, row in rows.items() if row.clocks}
    report["_change_s"] = phases[1].start_s
    return report


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both orders of the two mixes under every controller."""
    config = EngineConfig(gpu=args.gpu, model=args.model, max_num_seqs=args.max_num_seqs)
    scheme = scheme_by_name(args.scheme)
    slos = default_slos(scheme)
    profiles: dict[str, ProfileTable] = {}
    for mix in MIXES:
        prompts, outputs = _trace_lengths(mix)
        began = time.perf_counter()
        profiles[mix] = profile_of_lengths(config, prompts.tolist(), outputs.tolist(),
                                           partition="bench", name=mix)  # fmt: skip
        print(f"profile of the {mix} mix: {time.perf_counter() - began:.1f} s", file=sys.stderr)
    orders = {"→".join(order): _one_order(order, args, config, scheme, slos, profiles)
              for order in ORDERS}  # fmt: skip
    report: dict[str, Any] = {
        "engine": {"gpu": args.gpu, "model": args.model, "max_num_seqs": args.max_num_seqs},
        "scheme": args.scheme,
        "phase_minutes": args.phase_minutes,
        "load_share": args.load_share,
        "drift_window": args.drift_window,
        "orders": {
            k: {n: v for n, v in o.items() if not n.startswith("_")} for k, o in orders.items()
        },
    }
    if args.plots is not None:
        from greenserve.bench.profile_drift.plots import plot_profile_drift

        report["plots"] = [str(plot_profile_drift(orders, args.plots / "profile_drift.png"))]
    return report
