"""Profiles for the live planner: from a CSV, or measured on the engine model at start-up.

The MILP needs one :class:`ServingConfig` per (partition, class, mode, clock) (FREESH §3,
DynamoLLM Eq. 1's clock dimension). A ``greenserve profile`` CSV gives them directly. Modes the
CSV lacks are measured here with the same sweep (:func:`shared.engine.profiler.profile_sweep`)
on the calibrated simulated engine, shortened for start-up: ``window_s`` engine seconds of
Poisson arrivals per point and 15 % QPS precision (about 3 s for nine classes × three clocks
of one mode). Request lengths of each class are drawn from the Azure conversation trace,
bucketed by the class scheme's thresholds.

With ``planner.mixed_capacity`` the rows are then scaled by the capacity one instance
sustains on the trace's class mix (:func:`services.planner.mixed_profiles.derate_rows`, the
simulator's planned sets use the same function): :func:`live_mode_profiles` does both.

I/O: :func:`measure_mode_profiles` and :func:`live_mode_profiles` read the trace; everything
else is pure.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.planner.mixed_profiles import (
    MixedCapacity,
    MixedLoad,
    MixRequest,
    derate_rows,
    trace_mix,
)
from services.planner.problem import ServingConfig, SloPolicy
from services.planner.slo_filter import UNMEASURED
from shared.domain.classes import (
    DYNAMOLLM_SCHEME_NAME,
    FREESH_SCHEME_PREFIX,
    ClassScheme,
    default_slos,
    scheme_by_name,
)
from shared.engine.hardware import gpu_spec
from shared.engine.profile_sim import SimulatedProfileBackend, SimWindow
from shared.engine.profiler import ProfileSlo, ProfileTarget, RequestClass, profile_sweep
from shared.paths import data_path

__all__ = [
    "REFERENCE_TRACE",
    "ModeKey",
    "ModeProfileJob",
    "ProfileRequest",
    "class_pools",
    "class_pools_from_sides",
    "gpu_family",
    "live_mode_profiles",
    "measure_mode_profiles",
    "mode_idle_w",
    "profiles_for_mode",
    "reference_lengths",
    "scheme_name_for",
    "slo_policy_for",
]

ModeKey = tuple[str, int]
"""(GPU family, TP), e.g. ``("a100", 1)``: what a profile row and a live pool share."""


def gpu_family(gpu: str) -> str:
    """Short lower-case GPU name (``"A100-80GB"`` and ``"A100"`` both give ``"a100"``)."""
    return gpu.split("-")[0].lower()


def mode_idle_w(gpu: str, tp: int, model: str, max_num_seqs: int) -> float:
    """Idle power (W) of one instance of a mode with the model loaded, on the engine model:
    what a planned but unused instance draws (the live planner's ``whole_instances``)."""
    from shared.engine.api import EngineConfig
    from shared.engine.simulated import create_engine

    engine = create_engine(EngineConfig(gpu=gpu, model=model, tp=tp, max_num_seqs=max_num_seqs))
    return float(engine.idle_power_w)


def scheme_name_for(partition: str) -> str:
    """Classifier scheme of a profile partition (``"a"`` → ``"freesh-a"``)."""
    if partition == DYNAMOLLM_SCHEME_NAME or partition.startswith(FREESH_SCHEME_PREFIX):
        return partition
    return FREESH_SCHEME_PREFIX + partition


def slo_policy_for(partitions: Iterable[str]) -> SloPolicy:
    """Eq. 1e filters from the classifier's SLOs of each partition's scheme.

    TTFT per class as the classifier targets it (DynamoLLM Table IV for ``dynamollm9``,
    FREESH's 300/600 ms for its partitions); TBT the loosest class target; E2E ≤ 5 × mean.
    """
    ttft: dict[str, float] = {}
    tbt = 0.0
    for partition in partitions:
        for cls, slo in default_slos(scheme_by_name(scheme_name_for(partition))).items():
            ttft[cls] = max(ttft.get(cls, 0.0), slo.ttft_ms)
            tbt = max(tbt, slo.tbt_ms)
    return SloPolicy(ttft_ms_by_class=ttft, tbt_ms=tbt or None)


def profiles_for_mode(configs: Sequence[ServingConfig], mode: ModeKey) -> tuple[ServingConfig, ...]:
    """The rows of one mode (GPU family and TP) among ``configs``."""
    family, tp = mode
    return tuple(c for c in configs if gpu_family(c.gpu_type) == family and c.tensor_parallel == tp)


def class_pools(
    scheme: ClassScheme, lengths: Iterable[tuple[int, int]], *, pool_size: int = 200
) -> list[RequestClass]:
    """Prompt and output length pools per class of ``scheme`` from (prompt, output) pairs.

    A class's prompts are the observed prompts in its input bucket, its outputs the observed
    outputs in its output bucket, drawn independently (as ``load_request_classes`` does for
    FREESH's partitions); pools are thinned evenly to ``pool_size``. Classes with no sample
    on either side are left out.
    """
    pairs = [(p, o) for p, o in lengths if p >= 1 and o >= 1]
    return class_pools_from_sides(
        scheme, [p for p, _ in pairs], [o for _, o in pairs], pool_size=pool_size
    )


def class_pools_from_sides(
    scheme: ClassScheme, prompts: Iterable[int], outputs: Iterable[int], *, pool_size: int = 200
) -> list[RequestClass]:
    """:func:`class_pools` from the two sides apart (each drawn independently anyway)."""
    prompt_list = [p for p in prompts if p >= 1]
    output_list = [o for o in outputs if o >= 1]
    classes: list[RequestClass] = []
    for name in scheme.classes:
        first, second = scheme.labels.index(name[0]), scheme.labels.index(name[1])
        ins = sorted(p for p in prompt_list if scheme.input_bucket(p) == first)
        outs = sorted(o for o in output_list if scheme.output_bucket(o) == second)
        if ins and outs:
            classes.append(
                RequestClass(
                    partition=scheme.name,
                    name=name,
                    prompt_tokens=_thin(ins, pool_size),
                    output_tokens=_thin(outs, pool_size),
                )
            )
    return classes


def _thin(values: list[int], size: int) -> tuple[int, ...]:
    if len(values) <= size:
        return tuple(values)
    return tuple(values[(i * len(values)) // size] for i in range(size))


REFERENCE_TRACE = "AzureLLMInferenceTrace_conv.csv"
"""Lengths the planner profiles on before it has observed its own traffic."""


@functools.lru_cache(maxsize=1)
def reference_lengths() -> tuple[tuple[int, int], ...]:
    """(prompt, output) of every request of :data:`REFERENCE_TRACE`."""
    with data_path("traces", REFERENCE_TRACE).open(newline="") as handle:
        return tuple(
            (int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(handle)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileRequest:
    """What to measure for one live mode."""

    gpu: str
    tp: int
    model: str
    scheme: str
    clock_fractions: tuple[float, ...] = (1.0, 0.75, 0.5)
    window_s: float = 30.0
    tolerance: float = 0.15
    max_num_seqs: int = 256
    prompts: tuple[int, ...] = ()
    """Prompt lengths to draw from (:func:`shared.domain.observed_mix.profile_lengths`);
    empty, with ``outputs``: the ``conv`` trace's, the planner's lengths before it has
    observed any."""
    outputs: tuple[int, ...] = ()


def measure_mode_profiles(request: ProfileRequest) -> tuple[ServingConfig, ...]:
    """Profile one mode on the simulated engine for every class of ``request.scheme``.

    Rows carry the scheme name as partition and the short GPU name as ``gpu_type``; a class
    whose SLO no load meets keeps ``max_qps = 0`` (the MILP never uses it).

    Raises:
        ValueError: unknown GPU, model or scheme.
    """
    scheme = scheme_by_name(request.scheme)
    if request.prompts and request.outputs:
        prompts, outputs = request.prompts, request.outputs
    else:
        lengths = reference_lengths()
        prompts, outputs = tuple(p for p, _ in lengths), tuple(o for _, o in lengths)
    gpu = gpu_spec(request.gpu)
    clocks = sorted({gpu.snap_clock(f * gpu.max_clock_mhz) for f in request.clock_fractions})
    targets = [
        ProfileTarget(
            gpu_type=gpu.name.split("-")[0], tp=request.tp, model=request.model, clock_mhz=clock
        )
        for clock in reversed(clocks)
    ]
    slos = default_slos(scheme)
    slo = ProfileSlo(
        ttft_ms_by_class={cls: s.ttft_ms for cls, s in slos.items()},
        tbt_ms=max(s.tbt_ms for s in slos.values()),
    )
    backend = SimulatedProfileBackend(
        window=SimWindow(window_s=request.window_s, drain_s=2.0 * request.window_s),
        max_num_seqs=request.max_num_seqs,
    )
    rows = profile_sweep(
        backend,
        targets,
        class_pools_from_sides(scheme, prompts, outputs),
        slo=slo,
        relative_tolerance=request.tolerance,
    )
    return tuple(
        ServingConfig(
            partition=row.partition,
            request_class=row.request_type,
            mode=row.mode,
            gpu_type=row.gpu_type,
            gpus=row.gpus,
            tensor_parallel=row.tensor_parallel,
            clock_mhz=row.clock_mhz,
            power_w=row.power_w,
            max_qps=row.max_qps,
            e2e_s=_finite(row.e2e_s),
            tbt_ms=_finite(row.tbt_ms),
            ttft_ms=_finite(row.ttft_ms),
        )
        for row in rows
    )


def _finite(value: float) -> float:
    """NaN means 'never measured' (no finished request): an SLO filter must reject it."""
    return value if value == value else UNMEASURED


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeProfileJob:
    """Everything the live planner prepares for one mode (picklable: it runs in a child)."""

    request: ProfileRequest
    rows: tuple[ServingConfig, ...] = ()
    """Rows from the profiles CSV; empty: measure them (:func:`measure_mode_profiles`)."""
    mixed: bool = False
    """Scale the rows of ``request.scheme`` by their measured mixed-class capacity."""
    groups: tuple[tuple[str, str], ...] = ()
    """(class, group) pairs: measure each exclusive group's sub-mix apart."""
    observed: tuple[tuple[int, int], ...] = ()
    """Served (prompt, output) lengths to measure the mix on; empty: the reference trace's.
    The one-class rows' lengths are ``request.prompts``/``outputs``."""


def live_mode_profiles(
    job: ModeProfileJob,
) -> tuple[tuple[ServingConfig, ...], tuple[MixedCapacity, ...]]:
    """One mode's rows for the live MILP and, when mixed, what the mix measured per clock
    and group. Rows of partitions other than ``request.scheme`` are left as they are (the
    mix is classified by that scheme only). The mixed goal is the one-class rows'
    percentile, as the simulator's planned sets use it, so ``κ`` isolates the mixing."""
    rows = job.rows or measure_mode_profiles(job.request)
    if not job.mixed:
        return rows, ()
    scheme = scheme_by_name(job.request.scheme)
    own = tuple(r for r in rows if scheme_name_for(r.partition) == scheme.name)
    others = tuple(r for r in rows if scheme_name_for(r.partition) != scheme.name)
    scaled, found = derate_rows(
        own,
        gpu=job.request.gpu,
        model=job.request.model,
        scheme=scheme.name,
        max_num_seqs=job.request.max_num_seqs,
        mix=(
            tuple(MixRequest(p, o, scheme.classify(p, o)) for p, o in job.observed)
            if job.observed
            else trace_mix(scheme)
        ),
        load=MixedLoad(goal=ProfileSlo().percentile),
        groups=dict(job.groups),
    )
    return scaled + others, found
