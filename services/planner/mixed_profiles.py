"""Mixed-class capacity: what one instance of a mode sustains on the trace's class mix.

The per-class profile rows (:mod:`services.planner.live_profiles`) measure each class alone,
and the MILP's slice model adds their capacities up: an instance serving a share ``w_r`` of
class ``r`` at total rate ``Q`` is full when ``Σ_r Q·w_r / L̄_r = 1`` (FREESH Eq. 1b with time
shares). A live pool mixes every class its routes send on each instance, so long prefills
sit in the same iterations as short requests' first tokens, which one-class profiles never
see. This module measures the rate ``Q_mix`` one instance sustains on the class mix of the
trace (prompt and output lengths drawn jointly from it) through the same calibrated engine
(:func:`shared.engine.simulated.create_engine`) and the same bracketing search
(:func:`shared.engine.profiler.max_sustainable_qps`) as the per-class profiles, and scales
the mode's per-class rows at each clock by ``κ = Q_mix / Q_model``, where
``Q_model = 1 / Σ_r w_r / L̄_r`` is what the slice model predicts for that mix. The MILP then
keeps its per-class structure (relative class costs, SLO filters) while its capacity per
worker is what a mixed instance measured.

"Sustains" is the SLO-attainment goal itself: at least ``goal`` of the measured requests meet
their class's TTFT and TBT targets (unfinished requests count as misses), not the per-class
p90 the one-class rows use, because the goal the fleet is judged by is a share of requests.

Pure apart from :func:`trace_mix`, which reads the trace.
"""

from __future__ import annotations

import csv
import itertools
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from services.classifier.classes import ClassScheme, default_slos, scheme_by_name
from services.planner.problem import ServingConfig
from shared.engine.api import EngineConfig, EngineRequest
from shared.engine.coefficients import load_coefficients
from shared.engine.hardware import gpu_spec
from shared.engine.profiler import LoadMeasurement, max_sustainable_qps
from shared.engine.simulated import create_engine
from shared.paths import data_path

__all__ = [
    "MixRequest",
    "MixedCapacity",
    "MixedLoad",
    "class_shares",
    "derate_rows",
    "measure_mix",
    "mixed_capacity",
    "model_capacity",
    "trace_mix",
]


@dataclass(frozen=True, slots=True)
class MixRequest:
    """One request of the mix: true lengths and its class."""

    prompt: int
    output: int
    request_class: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MixedLoad:
    """How a mixed-load point is replayed and judged."""

    window_s: float = 120.0
    """Arrival window, engine seconds. Longer than the one-class profiles' 30 s: the check is
    a 99 % share, which needs hundreds of measured requests to resolve."""
    warmup_share: float = 1.0 / 3.0
    """Leading share of requests left out of the judgement (the batch fills)."""
    drain_s: float = 120.0
    """Most engine time to wait after the last arrival for measured requests to finish."""
    goal: float = 0.99
    """Share of measured requests that must meet their class SLO (the fleet's goal)."""
    tolerance: float = 0.05
    """Relative precision of the capacity search."""
    seed: int = 0

    @property
    def min_requests(self) -> int:
        """Requests per point, at least: ten misses allowed among the measured ones, so one
        unlucky collision does not decide a 99 % check (the window stretches at low rates)."""
        return math.ceil(10.0 / (1.0 - self.goal) / (1.0 - self.warmup_share))


def trace_mix(scheme: ClassScheme, trace_file: str = "AzureLLMInferenceTrace_conv.csv") -> tuple[
    MixRequest, ...
]:  # fmt: skip
    """Every request of the trace as (prompt, output, class): the mix a pool is sent."""
    path = data_path("traces", trace_file)
    with path.open(newline="") as handle:
        rows = [
            (int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(handle)
        ]
    return tuple(MixRequest(p, o, scheme.classify(p, o)) for p, o in rows if p >= 1 and o >= 1)


def class_shares(mix: Sequence[MixRequest]) -> dict[str, float]:
    """Share of requests per class."""
    counts = Counter(r.request_class for r in mix)
    total = sum(counts.values())
    return {cls: n / total for cls, n in counts.items()}


def model_capacity(rows: Sequence[ServingConfig], shares: Mapping[str, float]) -> float:
    """What the slice model says one instance sustains on ``shares``: ``1 / Σ w_r / L̄_r``.

    Zero when a class of the mix has no usable row (``L̄_r = 0``) or no row at all.
    """
    by_class = {r.request_class: r.max_qps for r in rows}
    load = 0.0
    for cls, share in shares.items():
        if share <= 0:
            continue
        qps = by_class.get(cls, 0.0)
        if qps <= 0:
            return 0.0
        load += share / qps
    return 1.0 / load if load > 0 else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class MixedCapacity:
    """One mode at one clock: measured and modelled capacity on the mix, and their ratio."""

    clock_mhz: float
    measured_qps: float
    model_qps: float
    attainment: float
    """Share of measured requests meeting their SLO at ``measured_qps``."""

    @property
    def derating(self) -> float:
        """``κ = Q_mix / Q_model`` (0 when the model has no capacity for the mix)."""
        return self.measured_qps / self.model_qps if self.model_qps > 0 else 0.0


def measure_mix(
    config: EngineConfig,
    mix: Sequence[MixRequest],
    qps: float,
    load: MixedLoad,
    slo_ms: Mapping[str, tuple[float, float]],
) -> LoadMeasurement:
    """Replay a Poisson stream of ``mix`` at ``qps`` on a fresh engine.

    ``slo_ms`` maps each class to its (TTFT, TBT) targets. The returned measurement's
    ``ttft_s`` holds, per measured request, how far it was from meeting its SLO (≤ 0: met;
    unfinished requests are reported as ``unfinished``), so a share can be read from it.
    """
    engine = create_engine(config, coefficients=load_coefficients())
    count = max(load.min_requests, round(qps * load.window_s))
    rng = random.Random(f"{load.seed}/mix")
    arrivals = [t / qps for t in itertools.accumulate(rng.expovariate(1.0) for _ in range(count))]
    picks = rng.choices(mix, k=count)
    cap = engine.kv_blocks_total * engine.config.block_size
    warm = int(load.warmup_share * count)
    first: dict[int, float] = {}
    finish: dict[int, float] = {}
    marks = [arrivals[warm], arrivals[-1]]
    energy: list[tuple[float, float]] = []
    deadline = arrivals[-1] + load.drain_s
    index = done = 0
    while done < count - warm and engine.now_s < deadline:
        next_arrival = arrivals[index] if index < count else deadline
        until = min(next_arrival, marks[0]) if marks else next_arrival
        while engine.now_s < until and (run := engine.step_many(1 << 30, until)) is not None:
            if run.prefill_tokens:
                for rid in run.emitted[run.decode_tokens :]:
                    first.setdefault(int(rid), engine.now_s)
            for rid in run.finished:
                finish[int(rid)] = engine.now_s
                done += int(rid) >= warm
        engine.idle_until(until)
        if marks and engine.now_s >= marks[0]:
            energy.append((engine.now_s, engine.energy_j))
            marks.pop(0)
        if index < count and engine.now_s >= arrivals[index]:
            pick = picks[index]
            engine.add(
                EngineRequest(
                    request_id=str(index),
                    prompt_tokens=max(1, min(pick.prompt, cap - pick.output)),
                    output_tokens=pick.output,
                    arrival_s=arrivals[index],
                )
            )
            index += 1
    slack: list[float] = []
    unfinished = 0
    for key in range(warm, count):
        pick = picks[key]
        ttft_ms, tbt_ms = slo_ms[pick.request_class]
        end = finish.get(key)
        if end is None:
            unfinished += 1
            continue
        ttft = first[key] - arrivals[key]
        tbt = (end - first[key]) / (pick.output - 1) if pick.output > 1 else 0.0
        slack.append(max(ttft - ttft_ms / 1e3, tbt - tbt_ms / 1e3))
    (t0, e0), (t1, e1) = energy[0], energy[-1]
    return LoadMeasurement(
        qps=qps,
        power_w=(e1 - e0) / (t1 - t0) if t1 > t0 else 0.0,
        ttft_s=tuple(slack),
        tbt_s=(),
        e2e_s=(),
        unfinished=unfinished,
        clock_mhz=engine.clock_mhz,
    )


def _attainment(measurement: LoadMeasurement) -> float:
    total = len(measurement.ttft_s) + measurement.unfinished
    met = sum(1 for s in measurement.ttft_s if s <= 0.0)
    return met / total if total else 0.0


def mixed_capacity(
    config: EngineConfig,
    mix: Sequence[MixRequest],
    slo_ms: Mapping[str, tuple[float, float]],
    load: MixedLoad,
    *,
    start_qps: float,
) -> tuple[float, float]:
    """Highest rate of ``mix`` one instance serves with ≥ ``load.goal`` of requests in SLO.

    Returns ``(qps, attainment there)``; ``(0, …)`` when even the lowest rate fails.
    """
    qps, measurement = max_sustainable_qps(
        partial(measure_mix, config, mix, load=load, slo_ms=slo_ms),
        lambda m: _attainment(m) >= load.goal,
        start_qps=max(start_qps, 1.0 / 16),
        growth=1.3,
        relative_tolerance=load.tolerance,
    )
    return qps, _attainment(measurement)


def derate_rows(
    rows: Sequence[ServingConfig],
    *,
    gpu: str,
    model: str,
    scheme: str,
    max_num_seqs: int,
    mix: Sequence[MixRequest],
    load: MixedLoad | None = None,
) -> tuple[tuple[ServingConfig, ...], tuple[MixedCapacity, ...]]:
    """Scale each clock's per-class rows of one mode by its measured mixed-load ``κ``.

    ``rows`` are one mode's rows (one GPU type and TP). Classes the mix lacks keep their
    share at zero; a clock whose model capacity is zero keeps its rows (nothing to scale).

    Returns:
        The scaled rows and, per clock, what was measured.
    """
    load = load or MixedLoad()
    slos = default_slos(scheme_by_name(scheme))
    slo_ms = {cls: (s.ttft_ms, s.tbt_ms) for cls, s in slos.items()}
    shares = class_shares(mix)
    by_clock: dict[float | None, list[ServingConfig]] = {}
    for row in rows:
        by_clock.setdefault(row.clock_mhz, []).append(row)
    spec = gpu_spec(gpu)
    out: list[ServingConfig] = []
    found: list[MixedCapacity] = []
    for clock, group in by_clock.items():
        modelled = model_capacity(group, shares)
        if modelled <= 0:
            out.extend(group)
            continue
        config = EngineConfig(
            gpu=spec.name,
            model=model,
            tp=group[0].tensor_parallel,
            max_num_seqs=max_num_seqs,
            clock_mhz=clock,
        )
        measured, attained = mixed_capacity(config, mix, slo_ms, load, start_qps=modelled)
        capacity = MixedCapacity(
            clock_mhz=clock if clock is not None else spec.max_clock_mhz,
            measured_qps=measured,
            model_qps=modelled,
            attainment=attained,
        )
        found.append(capacity)
        kappa = capacity.derating
        out.extend(replace(r, max_qps=round(r.max_qps * kappa, 4)) for r in group)
    return tuple(out), tuple(found)
