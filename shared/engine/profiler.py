"""Profile tables for the planner: max sustainable QPS, power and latency per configuration.

FREESH §3 (seed 000) plans with one row per (partition, request class, mode): the power
P̃ of an instance at its highest sustainable arrival rate L̄, and the E2E, TBT and TTFT
seen there; DynamoLLM Eq. 1 adds the SM clock as a dimension. :func:`profile_sweep` builds
those rows against any :class:`ProfileBackend` (the simulated engine here; an HTTP
OpenAI-compatible endpoint behind the same protocol elsewhere):

1. For each target (GPU type, TP, SM clock) and request class, the backend replays an
   open-loop Poisson stream at a given QPS and reports per-request latencies and mean power.
2. :func:`max_sustainable_qps` doubles the QPS until the SLO breaks (p90 TTFT within the
   class limit, p90 TBT within its limit, every measured request finished), then bisects.
3. The row carries the measurement at that QPS (means), or at the lowest probed QPS with
   ``max_qps = 0`` when even that breaks the SLO (as FREESH's unusable rows do).

Pure: the only I/O is in the explicit loader :func:`load_request_classes` and writer
:func:`write_profile_csv`.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_TTFT_MS_BY_CLASS",
    "PROFILE_COLUMNS",
    "CapacityHint",
    "LoadMeasurement",
    "ProfileBackend",
    "ProfileRow",
    "ProfileSlo",
    "ProfileTarget",
    "RequestClass",
    "UnsupportedTargetError",
    "load_request_classes",
    "max_sustainable_qps",
    "profile_sweep",
    "write_profile_csv",
]

DEFAULT_TTFT_MS_BY_CLASS: Final[Mapping[str, float]] = {
    "SS": 300.0, "SL": 300.0, "LS": 600.0, "LL": 600.0,
}  # fmt: skip
"""FREESH's TTFT limits (seed 000 §1.4: 300 ms for short inputs, 600 ms for long)."""

PROFILE_COLUMNS: Final = (
    "partition", "request_type", "mode", "gpu_type", "gpus", "tensor_parallel",
    "power_w", "max_qps", "e2e_s", "tbt_ms", "ttft_ms", "clock_mhz",
)  # fmt: skip
"""The header of ``freesh/profiles.csv`` plus ``clock_mhz``."""


class UnsupportedTargetError(ValueError):
    """The backend cannot run this target (e.g. the model does not fit at that TP)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestClass:
    """A request class and the token lengths its requests are drawn from."""

    partition: str
    name: str
    """``"SS"``, ``"SL"``, ``"LS"`` or ``"LL"`` (input, then output length)."""
    prompt_tokens: tuple[int, ...]
    """Pool of prompt lengths (drawn uniformly)."""
    output_tokens: tuple[int, ...]
    """Pool of output lengths (drawn uniformly, independently of the prompt)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileTarget:
    """One serving configuration (a FREESH mode) at one SM clock."""

    gpu_type: str
    """Short GPU name as the planner's inventory uses it (``"A100"``, ``"H100"``)."""
    tp: int
    model: str
    clock_mhz: float | None = None
    """``None`` means the GPU's maximum clock."""

    @property
    def mode(self) -> str:
        """Mode label of the row (``"H100-tp4"``); the clock has its own column."""
        return f"{self.gpu_type}-tp{self.tp}"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadMeasurement:
    """What a backend saw at one arrival rate (requests that arrived in the measured window)."""

    qps: float
    power_w: float
    """Mean power of the instance (all its GPUs) over the measured window."""
    ttft_s: tuple[float, ...]
    tbt_s: tuple[float, ...]
    """Mean inter-token time of each finished request with more than one output token."""
    e2e_s: tuple[float, ...]
    unfinished: int
    """Measured requests that had not finished when the backend stopped waiting."""
    clock_mhz: float


@runtime_checkable
class CapacityHint(Protocol):
    """Optional backend extension: a rough first guess of the sustainable QPS."""

    def capacity_qps(self, target: ProfileTarget, request_class: RequestClass) -> float:
        """Return a rough sustainable QPS (it only saves search steps; any value is safe)."""
        ...


class ProfileBackend(Protocol):
    """Anything that can serve a request stream on a target and report what it saw."""

    def measure(
        self, target: ProfileTarget, request_class: RequestClass, qps: float
    ) -> LoadMeasurement:
        """Replay a Poisson stream of ``request_class`` at ``qps`` on ``target``.

        Raises:
            UnsupportedTargetError: when the target cannot run.
        """
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileSlo:
    """The SLO a sustainable load must meet (FREESH Eq. 1e filters, repo values)."""

    ttft_ms_by_class: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_TTFT_MS_BY_CLASS)
    )
    default_ttft_ms: float = 600.0
    tbt_ms: float = 150.0
    percentile: float = 0.9
    """Share of measured requests that must meet each limit."""

    def met_by(self, request_class: str, measurement: LoadMeasurement) -> bool:
        """Return whether ``measurement`` meets the SLO of ``request_class``."""
        if measurement.unfinished or not measurement.ttft_s:
            return False
        ttft_limit = self.ttft_ms_by_class.get(request_class, self.default_ttft_ms) / 1e3
        if _quantile(measurement.ttft_s, self.percentile) > ttft_limit:
            return False
        return not measurement.tbt_s or _quantile(measurement.tbt_s, self.percentile) <= (
            self.tbt_ms / 1e3
        )


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileRow:
    """One row of the profile table (FREESH ``profiles.csv`` plus the clock)."""

    partition: str
    request_type: str
    mode: str
    gpu_type: str
    gpus: int
    tensor_parallel: int
    power_w: float
    max_qps: float
    e2e_s: float
    tbt_ms: float
    ttft_ms: float
    clock_mhz: float


def max_sustainable_qps(
    measure: Callable[[float], LoadMeasurement],
    meets_slo: Callable[[LoadMeasurement], bool],
    *,
    start_qps: float = 1.0,
    min_qps: float = 1.0 / 16,
    max_qps: float = 512.0,
    growth: float = 2.0,
    relative_tolerance: float = 0.05,
) -> tuple[float, LoadMeasurement]:
    """Return the highest QPS meeting the SLO and the measurement there.

    Multiplies (or divides) ``start_qps`` by ``growth`` to bracket the SLO boundary, then
    bisects until the bracket is within ``relative_tolerance``. Returns
    ``(0.0, measurement at the lowest QPS tried)`` when even ``min_qps`` breaks the SLO.
    """
    cache: dict[float, LoadMeasurement] = {}

    def ok(qps: float) -> bool:
        if qps not in cache:
            cache[qps] = measure(qps)
        return meets_slo(cache[qps])

    qps = start_qps
    if ok(qps):
        low = qps
        while low * growth <= max_qps and ok(low * growth):
            low *= growth
        if low * growth > max_qps:
            return low, cache[low]
        high = low * growth
    else:
        high = qps
        while high / growth >= min_qps and not ok(high / growth):
            high /= growth
        low = high / growth
        if low < min_qps:
            return 0.0, cache[high]
    while high - low > relative_tolerance * high:
        middle = 0.5 * (low + high)
        if ok(middle):
            low = middle
        else:
            high = middle
    return low, cache[low]


def _row(
    target: ProfileTarget, request_class: RequestClass, qps: float, m: LoadMeasurement
) -> ProfileRow:
    def mean(values: tuple[float, ...]) -> float:
        return statistics.fmean(values) if values else float("nan")

    return ProfileRow(
        partition=request_class.partition,
        request_type=request_class.name,
        mode=target.mode,
        gpu_type=target.gpu_type,
        gpus=target.tp,
        tensor_parallel=target.tp,
        power_w=round(m.power_w, 2),
        max_qps=round(qps, 3),
        e2e_s=round(mean(m.e2e_s), 3),
        tbt_ms=round(1e3 * mean(m.tbt_s), 3),
        ttft_ms=round(1e3 * mean(m.ttft_s), 3),
        clock_mhz=m.clock_mhz,
    )


def _measure_at(
    backend: ProfileBackend, target: ProfileTarget, request_class: RequestClass, qps: float
) -> LoadMeasurement:
    return backend.measure(target, request_class, qps)


def profile_sweep(
    backend: ProfileBackend,
    targets: Iterable[ProfileTarget],
    classes: Iterable[RequestClass],
    *,
    slo: ProfileSlo | None = None,
    relative_tolerance: float = 0.05,
    on_point: Callable[[ProfileTarget, RequestClass, ProfileRow | None], None] | None = None,
) -> list[ProfileRow]:
    """Profile every (target, class) pair; skip targets the backend cannot run.

    ``on_point`` is called after each pair (``None`` row: unsupported), for progress display.
    """
    policy = slo or ProfileSlo()
    rows: list[ProfileRow] = []
    class_list = list(classes)
    # Neighbouring targets (the next clock step, the next TP) sustain similar loads, so the
    # last answer for a class is a better first guess than a constant: fewer doublings.
    last_qps: dict[tuple[str, str], float] = {}
    for target in targets:
        supported = True
        for request_class in class_list:
            if not supported:
                if on_point is not None:
                    on_point(target, request_class, None)
                continue
            try:
                key = (request_class.partition, request_class.name)
                start = last_qps.get(key)
                if start is None and isinstance(backend, CapacityHint):
                    start = backend.capacity_qps(target, request_class)
                qps, measurement = max_sustainable_qps(
                    partial(_measure_at, backend, target, request_class),
                    partial(policy.met_by, request_class.name),
                    start_qps=start or 1.0,
                    growth=2.0 if start is None else 1.3,
                    relative_tolerance=relative_tolerance,
                )
                if qps > 0:
                    last_qps[key] = qps
            except UnsupportedTargetError:
                supported = False
                if on_point is not None:
                    on_point(target, request_class, None)
                continue
            row = _row(target, request_class, qps, measurement)
            rows.append(row)
            if on_point is not None:
                on_point(target, request_class, row)
    return rows


def load_request_classes(
    trace_csv: Path, partitions_csv: Path, *, pool_size: int = 2000
) -> list[RequestClass]:
    """Build request classes from a trace's lengths and FREESH's partition thresholds.

    A class is input below/above the partition's input threshold × output below/above its
    output threshold. Prompt and output pools are drawn from the trace's marginal lengths
    within those ranges, independently (assumption: some classes, e.g. partition b's SL,
    have no joint samples in the conversation trace). Pools are thinned evenly to at most
    ``pool_size`` values.
    """
    with trace_csv.open(newline="") as handle:
        lengths = [(int(r["ContextTokens"]), int(r["GeneratedTokens"]))
                   for r in csv.DictReader(handle)]  # fmt: skip
    with partitions_csv.open(newline="") as handle:
        partitions = list(csv.DictReader(handle))
    prompts = sorted(p for p, _ in lengths if p >= 1)
    outputs = sorted(o for _, o in lengths if o >= 1)
    classes: list[RequestClass] = []
    for part in partitions:
        input_edge = int(part["input_threshold_tokens"])
        output_edge = int(part["output_threshold_tokens"])
        for name in ("SS", "SL", "LS", "LL"):
            prompt_pool = [p for p in prompts if (p < input_edge) == (name[0] == "S")]
            output_pool = [o for o in outputs if (o < output_edge) == (name[1] == "S")]
            if not prompt_pool or not output_pool:
                continue
            classes.append(
                RequestClass(
                    partition=part["partition"],
                    name=name,
                    prompt_tokens=_thin(prompt_pool, pool_size),
                    output_tokens=_thin(output_pool, pool_size),
                )
            )
    return classes


def _thin(values: list[int], size: int) -> tuple[int, ...]:
    if len(values) <= size:
        return tuple(values)
    return tuple(values[(i * len(values)) // size] for i in range(size))


def write_profile_csv(path: Path, rows: Iterable[ProfileRow]) -> None:
    """Write rows with the FREESH ``profiles.csv`` header plus ``clock_mhz``."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(PROFILE_COLUMNS)
        for row in rows:
            writer.writerow([getattr(row, column) for column in PROFILE_COLUMNS])
