"""One summary of a run, per request class and overall, for loadgen and simulator alike.

:func:`summarize` turns request records (or their columns) plus optional energy accounting
into a :class:`RunSummary`: TTFT/TBT/E2E mean and P50/P90/P99, SLO attainment, violation
rate (FREESH Eq. 10), Jain fairness (FREESH Eq. 9), Avg MaxWaitingTime (FREESH App. C.4),
energy (Wh), CO2 (kg) and tokens per joule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shared.metrics.energy import JOULES_PER_WH, tokens_per_joule
from shared.metrics.fairness import quartile_jain
from shared.metrics.latency import (
    SLO_WINDOW_FACTOR,
    LatencyStats,
    e2e_s,
    latency_stats,
    max_waiting_s,
    mean_tbt_s,
    ttft_s,
    violations,
)
from shared.metrics.records import RecordColumns, RequestRecord, to_columns

__all__ = ["ClassSlo", "ClassSummary", "EnergyAccount", "RunSummary", "summarize"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassSlo:
    """Optional absolute latency targets of a class, on top of the 5·Lat E2E window."""

    ttft_s: float | None = None
    """TTFT target (e.g. DynamoLLM Table IV: 250/400/2000 ms by input class)."""
    tbt_s: float | None = None
    """Mean time-between-tokens target."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EnergyAccount:
    """Energy and emissions of a run, measured or simulated elsewhere."""

    energy_j: float
    """GPU energy in joules."""
    co2_kg: float | None = None
    """Emissions in kg CO2 (energy × regional intensity)."""
    gpu_hours: float | None = None
    """GPU-hours allocated."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassSummary:
    """Metrics of one request class (or of all requests)."""

    requests: int
    completed: int
    output_tokens: int
    ttft: LatencyStats
    tbt: LatencyStats
    e2e: LatencyStats
    slo_attainment: float
    violation_rate: float
    jain: float
    avg_max_waiting_s: float

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict (NaN becomes None)."""
        return {
            "requests": self.requests,
            "completed": self.completed,
            "output_tokens": self.output_tokens,
            "ttft_s": self.ttft.as_dict(),
            "tbt_s": self.tbt.as_dict(),
            "e2e_s": self.e2e.as_dict(),
            "slo_attainment": _finite(self.slo_attainment),
            "violation_rate": _finite(self.violation_rate),
            "jain": _finite(self.jain),
            "avg_max_waiting_s": _finite(self.avg_max_waiting_s),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """Metrics of a whole run: overall, per class, and energy."""

    overall: ClassSummary
    per_class: dict[str, ClassSummary] = field(default_factory=dict)
    energy_wh: float | None = None
    co2_kg: float | None = None
    gpu_hours: float | None = None
    tokens_per_joule: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict."""
        return {
            "overall": self.overall.as_dict(),
            "per_class": {name: s.as_dict() for name, s in self.per_class.items()},
            "energy_wh": self.energy_wh,
            "co2_kg": self.co2_kg,
            "gpu_hours": self.gpu_hours,
            "tokens_per_joule": self.tokens_per_joule,
        }


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def _class_summary(
    columns: RecordColumns, slo: ClassSlo | None, window_factor: float
) -> ClassSummary:
    n = len(columns)
    ttft, tbt = ttft_s(columns), mean_tbt_s(columns)
    missed = violations(columns, window_factor)
    met = ~missed
    if slo is not None and slo.ttft_s is not None:
        met &= ttft <= slo.ttft_s
    if slo is not None and slo.tbt_s is not None:
        # A one-token request has no TBT and cannot miss a TBT target.
        met &= ~(tbt > slo.tbt_s)
    waiting = max_waiting_s(columns)
    return ClassSummary(
        requests=n,
        completed=int(columns.completed.sum()),
        output_tokens=int(columns.output_tokens.sum()),
        ttft=latency_stats(ttft),
        tbt=latency_stats(tbt),
        e2e=latency_stats(e2e_s(columns)),
        slo_attainment=float(met.mean()) if n else float("nan"),
        violation_rate=float(missed.mean()) if n else float("nan"),
        jain=quartile_jain(columns),
        avg_max_waiting_s=float(np.nanmean(waiting)) if np.isfinite(waiting).any() else math.nan,
    )


def summarize(
    records: Sequence[RequestRecord] | RecordColumns,
    *,
    energy: EnergyAccount | None = None,
    class_slos: Mapping[str, ClassSlo] | None = None,
    window_factor: float = SLO_WINDOW_FACTOR,
) -> RunSummary:
    """Summarise a run per request class and overall.

    Args:
        records: per-request records, or the same data as columns.
        energy: energy/emissions of the run, when measured or simulated.
        class_slos: optional absolute TTFT/TBT targets per class; a request attains its SLO
            when E2E ≤ window_factor·Lat and it meets its class targets.
        window_factor: β of FREESH Eq. 10 (5).

    Returns:
        The run summary; the overall Jain index treats all requests as one workload.
    """
    columns = records if isinstance(records, RecordColumns) else to_columns(records)
    slos = class_slos or {}
    per_class: dict[str, ClassSummary] = {}
    for name in sorted({str(c) for c in columns.request_class}):
        subset = columns.subset(columns.request_class == name)
        per_class[name] = _class_summary(subset, slos.get(name), window_factor)
    overall = _class_summary(columns, None, window_factor)
    if slos:
        # Overall attainment honours each class's own targets.
        attained = sum(s.slo_attainment * s.requests for s in per_class.values())
        overall = _replace_attainment(overall, attained / max(len(columns), 1))
    if energy is None:
        return RunSummary(overall=overall, per_class=per_class)
    return RunSummary(
        overall=overall,
        per_class=per_class,
        energy_wh=energy.energy_j / JOULES_PER_WH,
        co2_kg=energy.co2_kg,
        gpu_hours=energy.gpu_hours,
        tokens_per_joule=tokens_per_joule(overall.output_tokens, energy.energy_j),
    )


def _replace_attainment(summary: ClassSummary, attainment: float) -> ClassSummary:
    return replace(summary, slo_attainment=attainment)
