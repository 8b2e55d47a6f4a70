"""What one simulated run produced: request columns, the shared summary, energy, series.

Metrics are computed by ``shared.metrics.summarize``, the very function the live load
generator's report uses (TTFT/TBT/E2E percentiles per class, SLO attainment and FREESH Eq. 10
violations, Eq. 9 Jain fairness, energy, CO2, tokens per joule). :func:`build_result` reads
the requests and settings of a :class:`RunRecord` and the totals of the control loops, both
passed in.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from loadgen.simulator.control import Series
from shared.metrics import ClassSlo, EnergyAccount, RecordColumns, RunSummary, summarize

if TYPE_CHECKING:
    from loadgen.simulator.control import ControlLoops
    from loadgen.simulator.instance import RequestState
    from loadgen.simulator.nodes import NodeFleet
    from loadgen.simulator.policy_set import PolicySet
    from shared.domain.classes import ClassSLO

__all__ = ["RunRecord", "SimResult", "build_result", "columns_of"]


class RunRecord(Protocol):
    """What a result reads of a finished run besides the control loops' totals (a
    :class:`~loadgen.simulator.cluster.ClusterSimulator` is one)."""

    @property
    def policy(self) -> PolicySet:
        """The policy set that ran."""

    @property
    def slos(self) -> Mapping[str, ClassSLO]:
        """Each class's TTFT/TBT SLO."""

    @property
    def states(self) -> Sequence[RequestState]:
        """Every request of the run."""

    @property
    def measure_from_s(self) -> float:
        """Start of the measured window."""

    @property
    def record_token_times(self) -> bool:
        """Whether every token's time was kept."""

    @property
    def nodes(self) -> NodeFleet:
        """The servers (their power-on times)."""


@dataclass(slots=True, kw_only=True)
class SimResult:
    """One policy's run."""

    policy: str
    description: str
    clock_mode: str
    summary: RunSummary
    columns: RecordColumns
    requests: int
    completed: int
    rejected: int
    rejected_by_reason: dict[str, int]
    """Refused requests by cause: the classifier's error code (``too_long``: prompt plus
    output beyond the model's context), ``kv_cache`` (can never fit the engine's KV cache),
    ``bad_lengths`` (no prompt or no output tokens)."""
    token_mismatch: int
    energy_j: float
    co2_kg: float
    gpu_hours: float
    sim_s: float
    node_hours: float = 0.0
    """Powered node-time (booting included): the hours the servers were on."""
    node_power_ons: int = 0
    """Powered-off nodes switched on during the measured window (the initial fleet excluded)."""
    bare_energy_j: float = 0.0
    """Part of ``energy_j`` drawn by GPUs without a model on powered nodes."""
    measure_from_s: float = 0.0
    """Start of the measured window (requests arriving earlier warmed the run up)."""
    max_instances: int = 0
    """Most instances held at once (starting and draining included): a static pool's size."""
    max_gpus: int = 0
    """Most GPUs held by instances at once."""
    wall_s: float = 0.0
    scale_events: int = 0
    clock_changes: int = 0
    energy_wh_by_region: dict[str, float] | None = None
    co2_kg_by_region: dict[str, float] | None = None
    series: Series | None = None
    class_slos: dict[str, ClassSlo] | None = None
    """Each class's TTFT/TBT targets, which the latency figures mark."""
    plans: list[dict[str, Any]] | None = None
    """The epoch planner's solves (``planned`` policy sets): time, status, demand, counts."""

    @property
    def measured_s(self) -> float:
        """Simulated seconds inside the measured window."""
        return max(0.0, self.sim_s - self.measure_from_s)

    @property
    def sim_speedup(self) -> float:
        """Simulated seconds per wall second."""
        return self.sim_s / self.wall_s if self.wall_s > 0 else math.inf

    def as_dict(self, *, series: bool = False) -> dict[str, Any]:
        """A JSON-friendly dict (the time series only when asked)."""
        overall = self.summary.overall
        out: dict[str, Any] = {
            "policy": self.policy,
            "description": self.description,
            "clock": self.clock_mode,
            "requests": self.requests,
            "completed": self.completed,
            "rejected": self.rejected,
            "rejected_by_reason": self.rejected_by_reason,
            "token_mismatch": self.token_mismatch,
            "energy_wh": self.energy_j / 3600.0,
            "co2_kg": self.co2_kg,
            "gpu_hours": self.gpu_hours,
            "node_hours": self.node_hours,
            "node_power_ons": self.node_power_ons,
            "bare_idle_energy_wh": self.bare_energy_j / 3600.0,
            "measure_from_s": self.measure_from_s,
            "max_instances": self.max_instances,
            "max_gpus": self.max_gpus,
            "avg_power_w": self.energy_j / self.measured_s if self.measured_s > 0 else 0.0,
            "tokens_per_joule": self.summary.tokens_per_joule,
            "slo_attainment": overall.slo_attainment,
            "violation_rate": overall.violation_rate,
            "jain": overall.jain,
            "sim_s": self.sim_s,
            "wall_s": self.wall_s,
            "sim_speedup": self.sim_speedup,
            "scale_events": self.scale_events,
            "clock_changes": self.clock_changes,
            "energy_wh_by_region": self.energy_wh_by_region,
            "co2_kg_by_region": self.co2_kg_by_region,
            "plans": self.plans,
            "summary": self.summary.as_dict(),
        }
        if series and self.series is not None:
            out["series"] = {k: getattr(self.series, k) for k in self.series.__dataclass_fields__}
        return out


def columns_of(sim: RunRecord) -> RecordColumns:
    """Request outcomes as the shared metric columns (requests of the measured window)."""
    states = _measured(sim)
    n = len(states)
    completed = np.fromiter(
        (not s.rejected and s.tokens == s.output and s.last_s >= 0 for s in states), np.bool_, n
    )
    flat = offsets = None
    if sim.record_token_times:
        lengths = np.fromiter((len(s.token_times or ()) for s in states), np.int64, n)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        flat = np.fromiter(
            (t for s in states for t in (s.token_times or ())), np.float64, int(offsets[-1])
        )
    return RecordColumns(
        request_class=np.array([s.judged_class for s in states], dtype=np.str_),
        arrival_s=np.fromiter((s.arrival_s for s in states), np.float64, n),
        first_token_s=np.fromiter(
            (s.first_s if s.first_s >= 0 else math.nan for s in states), np.float64, n
        ),
        finish_s=np.where(
            completed, np.fromiter((s.last_s for s in states), np.float64, n), math.nan
        ),
        output_tokens=np.fromiter((s.tokens for s in states), np.int64, n),
        predicted_output_tokens=np.fromiter((s.predicted for s in states), np.int64, n),
        latency_budget_s=np.fromiter(
            (s.judged_lat_s if s.judged_lat_s > 0 else math.nan for s in states), np.float64, n
        ),
        completed=completed,
        token_times_flat=flat,
        token_offsets=offsets,
    )


def _measured(sim: RunRecord) -> Sequence[RequestState]:
    """Requests that arrived in the measured window (from ``sim.measure_from_s``)."""
    start = sim.measure_from_s
    return [s for s in sim.states if s.arrival_s >= start] if start > 0 else sim.states


def build_result(sim: RunRecord, control: ControlLoops) -> SimResult:
    """Summarise a finished simulation (requests, energy and time of the measured window).

    Args:
        sim: the run's requests and settings.
        control: its control loops, whose totals, series and planner log are the result's.
    """
    states = _measured(sim)
    columns = columns_of(sim)
    energy = EnergyAccount(
        energy_j=control.energy_j,
        co2_kg=control.co2_g / 1000.0,
        gpu_hours=control.gpu_seconds / 3600.0,
    )
    class_slos = {
        name: ClassSlo(ttft_s=s.ttft_ms / 1000.0, tbt_s=s.tbt_ms / 1000.0)
        for name, s in sim.slos.items()
    }
    summary = summarize(columns, energy=energy, class_slos=class_slos)
    reasons = Counter(s.reject_reason or "unknown" for s in states if s.rejected)
    mismatch = sum(1 for s in states if not s.rejected and s.tokens != s.output)
    return SimResult(
        class_slos=class_slos,
        policy=sim.policy.name,
        description=sim.policy.description,
        clock_mode=control.clock_note,
        summary=summary,
        columns=columns,
        requests=len(states),
        completed=int(columns.completed.sum()),
        rejected=sum(reasons.values()),
        rejected_by_reason=dict(sorted(reasons.items())),
        token_mismatch=mismatch,
        energy_j=control.energy_j,
        co2_kg=control.co2_g / 1000.0,
        gpu_hours=control.gpu_seconds / 3600.0,
        sim_s=control.end_s,
        node_hours=control.node_seconds / 3600.0,
        node_power_ons=sum(1 for t in sim.nodes.power_on_events if t >= sim.measure_from_s),
        bare_energy_j=control.bare_energy_j,
        measure_from_s=sim.measure_from_s,
        max_instances=control.max_instances,
        max_gpus=control.max_gpus,
        scale_events=control.scale_events,
        clock_changes=control.clock_changes,
        energy_wh_by_region={k: v / 3600.0 for k, v in control.energy_by_region.items()},
        co2_kg_by_region={k: v / 1000.0 for k, v in control.co2_by_region.items()},
        series=control.series,
        plans=control.planner.solves if control.planner is not None else None,
    )
