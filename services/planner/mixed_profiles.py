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

"Sustains" means at least ``goal`` of the measured requests meet their class's TTFT and TBT
targets (a share of requests, as the fleet is judged; unfinished requests miss). The policy
sets use 0.9, the share the one-class rows hold (their p90), so that ``κ`` isolates the
mixing. At 0.99 a mixed stream's attainment is flat near the goal at every load (short
requests behind long prefills miss regardless), so that search is ill-conditioned; with
exclusive class groups each group's sub-mix is measured instead (:func:`derate_rows`).

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

from services.planner.problem import ServingConfig
from shared.domain.classes import ClassScheme, default_slos, scheme_by_name
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
    group: str
    """The class group whose sub-mix was measured (``"all"``: the whole mix)."""
    measured_qps: float
    model_qps: float
    attainment: float
    """Share of measured requests meeting their SLO at ``measured_qps``."""

    @property
    def derating(self) -> float:
        """``κ = Q_mix / Q_model`` (0 when the model has no capacity for the mix)."""
        return self.measured_qps / self.model_qps if self.model_qps > 0 else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class MixMeasurement:
    """What one mixed-load point saw, per measured request (in arrival order)."""

    qps: float
    power_w: float
    classes: tuple[str, ...]
    ttft_s: tuple[float, ...]
    """Time to first token; ``inf`` for a request that never got one."""
    tbt_s: tuple[float, ...]
    """Mean inter-token time (0 for one-token requests, ``inf`` if unfinished)."""

    def met(self, slo_ms: Mapping[str, tuple[float, float]]) -> list[bool]:
        """Per request: TTFT and TBT within its class's targets."""
        return [
            t <= slo_ms[c][0] / 1e3 and b <= slo_ms[c][1] / 1e3
            for c, t, b in zip(self.classes, self.ttft_s, self.tbt_s, strict=True)
        ]

    def attainment(self, slo_ms: Mapping[str, tuple[float, float]]) -> float:
        """Share of measured requests within their class SLO."""
        met = self.met(slo_ms)
        return sum(met) / len(met) if met else 0.0

    def ttft_quantile_ms(self, request_class: str, q: float) -> float:
        """The class's TTFT at quantile ``q`` (``inf`` when it has no request)."""
        values = sorted(
            t for c, t in zip(self.classes, self.ttft_s, strict=True) if c == request_class
        )
        if not values:
            return math.inf
        return 1e3 * values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


def measure_mix(
    config: EngineConfig, mix: Sequence[MixRequest], qps: float, load: MixedLoad
) -> MixMeasurement:
    """Replay a Poisson stream of ``mix`` at ``qps`` on a fresh engine (as the one-class
    backend does: arrivals stop after the window, measured requests drain)."""
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
    ttft: list[float] = []
    tbt: list[float] = []
    for key in range(warm, count):
        pick = picks[key]
        end = finish.get(key)
        ttft.append(first[key] - arrivals[key] if key in first else math.inf)
        if end is None:
            tbt.append(math.inf)
        else:
            tbt.append((end - first[key]) / (pick.output - 1) if pick.output > 1 else 0.0)
    (t0, e0), (t1, e1) = energy[0], energy[-1]
    return MixMeasurement(
        qps=qps,
        power_w=(e1 - e0) / (t1 - t0) if t1 > t0 else 0.0,
        classes=tuple(p.request_class for p in picks[warm:]),
        ttft_s=tuple(ttft),
        tbt_s=tuple(tbt),
    )


def mixed_capacity(
    config: EngineConfig,
    mix: Sequence[MixRequest],
    slo_ms: Mapping[str, tuple[float, float]],
    load: MixedLoad,
    *,
    start_qps: float,
) -> MixMeasurement | None:
    """The highest-rate point of ``mix`` one instance serves with ≥ ``load.goal`` of its
    requests in SLO (the bracketing search of the one-class profiles); ``None`` when even
    the lowest rate fails."""
    seen: dict[float, MixMeasurement] = {}

    def measure(qps: float) -> LoadMeasurement:
        seen[qps] = point = measure_mix(config, mix, qps, load)
        return LoadMeasurement(qps=qps, power_w=point.power_w, ttft_s=point.ttft_s,
                               tbt_s=(), e2e_s=(), unfinished=0, clock_mhz=0.0)  # fmt: skip

    qps, _ = max_sustainable_qps(
        measure,
        lambda m: seen[m.qps].attainment(slo_ms) >= load.goal,
        start_qps=max(start_qps, 1.0 / 16),
        growth=1.3,
        relative_tolerance=load.tolerance,
    )
    return seen[qps] if qps > 0 else None


def derate_rows(
    rows: Sequence[ServingConfig],
    *,
    gpu: str,
    model: str,
    scheme: str,
    max_num_seqs: int,
    mix: Sequence[MixRequest],
    load: MixedLoad | None = None,
    groups: Mapping[str, str] | None = None,
) -> tuple[tuple[ServingConfig, ...], tuple[MixedCapacity, ...]]:
    """Scale each clock's per-class rows of one mode by its measured mixed-load ``κ``.

    ``rows`` are one mode's rows (one GPU type and TP). Without ``groups`` the mix is the
    whole trace's; with ``groups`` (class → group, the planner's exclusive class groups) each
    group's rows are scaled by ``κ`` measured on that group's part of the mix, which is what
    a pool serving only that group sees. A (clock, group) whose model capacity is zero keeps
    its rows (nothing to scale).

    Returns:
        The scaled rows and, per clock and group, what was measured.
    """
    load = load or MixedLoad()
    slos = default_slos(scheme_by_name(scheme))
    slo_ms = {cls: (s.ttft_ms, s.tbt_ms) for cls, s in slos.items()}
    label = dict(groups) if groups else {r.request_class: "all" for r in mix}
    parts: dict[str, list[MixRequest]] = {}
    for request in mix:
        parts.setdefault(label.get(request.request_class, "all"), []).append(request)
    by_key: dict[tuple[float | None, str], list[ServingConfig]] = {}
    for row in rows:
        by_key.setdefault((row.clock_mhz, label.get(row.request_class, "all")), []).append(row)
    spec = gpu_spec(gpu)
    out: list[ServingConfig] = []
    found: list[MixedCapacity] = []
    for (clock, group), members in by_key.items():
        part = parts.get(group, [])
        modelled = model_capacity(members, class_shares(part)) if part else 0.0
        if modelled <= 0:
            out.extend(members)
            continue
        config = EngineConfig(
            gpu=spec.name,
            model=model,
            tp=members[0].tensor_parallel,
            max_num_seqs=max_num_seqs,
            clock_mhz=clock,
        )
        point = mixed_capacity(config, part, slo_ms, load, start_qps=modelled)
        capacity = MixedCapacity(
            clock_mhz=clock if clock is not None else spec.max_clock_mhz,
            group=group,
            measured_qps=point.qps if point is not None else 0.0,
            model_qps=modelled,
            attainment=point.attainment(slo_ms) if point is not None else 0.0,
        )
        found.append(capacity)
        out.extend(replace(r, max_qps=round(r.max_qps * capacity.derating, 4)) for r in members)
    return tuple(out), tuple(found)
