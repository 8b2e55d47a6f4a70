"""The planner's output: one epoch's plan as a plain dataclass, and the metrics of a plan.

A :class:`Plan` says how many instances of each serving configuration run in each region, which
request partition the classifier applies, how each class's demand splits across regions, and
what the plan costs (FREESH Eq. 1a: λ × P × Δt; MinEnergy: P × Δt). The wire message is built
from it elsewhere; nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from services.planner.problem import PartitionScheme, PlanningProblem, ServingConfig

__all__ = [
    "JOULES_PER_MWH",
    "Allocation",
    "Plan",
    "PlanCosts",
    "PlanStatus",
    "allocation_costs",
    "assemble_plan",
    "capacity_by_class",
    "demand_shortfall",
    "routing_weights",
]

JOULES_PER_MWH: Final = 3.6e9
"""W·s in one MWh: λ[unit/MWh] × P[W] × Δt[s] ÷ 3.6e9 is in the intensity's mass unit."""


class PlanStatus(enum.StrEnum):
    """How a plan was obtained. Anything but ``OPTIMAL`` deserves a look."""

    OPTIMAL = "optimal"
    TIME_LIMIT = "time_limit"
    """Feasible for Eq. 1 but the solver stopped at its time limit before proving optimality."""
    FALLBACK_SHORTFALL = "fallback_shortfall"
    """Eq. 1 infeasible: the plan covers the most demand the inventory allows (shortfall > 0)."""
    FALLBACK_GREEDY = "fallback_greedy"
    """The solver gave no plan (error or time limit without incumbent): greedy heuristic."""

    @property
    def is_fallback(self) -> bool:
        """Whether the plan breaks Eq. 1's demand constraint or was built without the MILP."""
        return self in (PlanStatus.FALLBACK_SHORTFALL, PlanStatus.FALLBACK_GREEDY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """Instances of one configuration in one region for the whole epoch."""

    region: str
    partition: str
    request_class: str
    gpu_type: str
    tensor_parallel: int
    clock_mhz: float | None
    """Clock to lock the instances at; ``None`` means the GPU's maximum."""
    instances: int
    gpus_per_instance: int
    power_w: float
    """Power of one instance (P̃)."""
    max_qps: float
    """Capacity of one instance (L̄)."""
    mode: str = ""

    @property
    def gpus(self) -> int:
        """GPUs all instances of this allocation occupy."""
        return self.instances * self.gpus_per_instance


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanCosts:
    """Energy and emissions of a plan over its epoch."""

    energy_wh: float
    co2_kg: float
    carbon_objective: float
    """Raw FREESH Eq. 1a value: Σ λ × P × Δt (intensity unit × W × s per MWh)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """One epoch's plan (FREESH §2.2 slow loop output)."""

    status: PlanStatus
    objective: str
    """``"carbon"`` or ``"energy"``."""
    tie_break: str
    partition: str
    """Chosen partition scheme (q_s = 1)."""
    thresholds: PartitionScheme | None
    allocations: tuple[Allocation, ...]
    routing: Mapping[str, Mapping[str, float]]
    """Share of each class's demand per region (class → region → weight, summing to 1)."""
    costs: PlanCosts
    epoch_s: float
    shortfall_qps: Mapping[str, float] = field(default_factory=dict)
    """Peak demand (× α) per class left uncovered; empty unless the plan is a fallback."""
    solve_s: float = 0.0
    """Wall time of the solver calls (all lexicographic stages)."""
    build_s: float = 0.0
    """Wall time spent building the model(s)."""
    solver: str = ""
    mip_gap: float | None = None
    """Relative gap the solver proved for the primary objective (HiGHS only)."""
    notes: tuple[str, ...] = ()

    @property
    def is_fallback(self) -> bool:
        """Whether this plan came from a fallback path (see :class:`PlanStatus`)."""
        return self.status.is_fallback

    @property
    def power_w(self) -> float:
        """Total power of all planned instances."""
        return sum(a.instances * a.power_w for a in self.allocations)

    def gpus_used(self) -> dict[tuple[str, str], int]:
        """GPUs used per (region, GPU type)."""
        used: dict[tuple[str, str], int] = defaultdict(int)
        for a in self.allocations:
            used[(a.region, a.gpu_type)] += a.gpus
        return dict(used)


def allocation_costs(
    problem: PlanningProblem, counts: Mapping[tuple[str, ServingConfig], int]
) -> PlanCosts:
    """Energy (Wh), CO2 (kg) and the raw Eq. 1a value of instance counts per (region, config).

    Emissions always use the true λ (negative rates count as avoided emissions, as in FREESH).
    """
    energy_ws = 0.0
    carbon = 0.0
    for (region, config), count in counts.items():
        if count <= 0:
            continue
        energy_ws += count * config.power_w * problem.epoch_s
        carbon += count * config.power_w * problem.step_s * sum(problem.intensity[region])
    co2_kg = carbon / JOULES_PER_MWH * problem.intensity_unit.kg_per_mwh
    return PlanCosts(energy_wh=energy_ws / 3600.0, co2_kg=co2_kg, carbon_objective=carbon)


def capacity_by_class(allocations: tuple[Allocation, ...]) -> dict[str, dict[str, float]]:
    """QPS capacity per class and region (Σ instances × L̄)."""
    capacity: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for a in allocations:
        capacity[a.request_class][a.region] += a.instances * a.max_qps
    return {cls: dict(by_region) for cls, by_region in capacity.items()}


def demand_shortfall(
    allocations: tuple[Allocation, ...], problem: PlanningProblem, partition: str
) -> dict[str, float]:
    """α × peak demand minus capacity, per class of ``partition`` where it is positive.

    Use it to check whether an old plan still covers a new forecast (overhead gate).
    """
    capacity = capacity_by_class(tuple(a for a in allocations if a.partition == partition))
    shortfall: dict[str, float] = {}
    for (part, cls), series in sorted(problem.demand_qps.items()):
        if part != partition:
            continue
        missing = problem.alpha * max(series) - sum(capacity.get(cls, {}).values())
        if missing > 1e-9:
            shortfall[cls] = missing
    return shortfall


def routing_weights(allocations: tuple[Allocation, ...]) -> dict[str, dict[str, float]]:
    """Share of each class's demand to send to each region: its share of the class's capacity.

    Because worker counts are constant over the epoch, routing every class in proportion to
    capacity is feasible whenever any routing is (Eq. 1b summed over regions), so these are the
    weights the router's weighted round-robin should use (FREESH §2.7).
    """
    weights: dict[str, dict[str, float]] = {}
    for cls, by_region in capacity_by_class(allocations).items():
        total = sum(by_region.values())
        if total > 0:
            weights[cls] = {region: cap / total for region, cap in sorted(by_region.items())}
    return weights


def assemble_plan(
    problem: PlanningProblem,
    counts: Mapping[tuple[str, ServingConfig], int],
    *,
    partition: str,
    status: PlanStatus,
    objective: str,
    tie_break: str,
    solve_s: float = 0.0,
    build_s: float = 0.0,
    solver: str = "",
    mip_gap: float | None = None,
    notes: tuple[str, ...] = (),
) -> Plan:
    """Turn instance counts per (region, configuration) into a :class:`Plan`.

    The shortfall is recomputed from the counts against α × peak demand of the chosen
    partition, so it is reported for every plan, not only fallbacks.
    """
    allocations = tuple(
        sorted(
            (
                Allocation(
                    region=region,
                    partition=config.partition,
                    request_class=config.request_class,
                    gpu_type=config.gpu_type,
                    tensor_parallel=config.tensor_parallel,
                    clock_mhz=config.clock_mhz,
                    instances=count,
                    gpus_per_instance=config.gpus,
                    power_w=config.power_w,
                    max_qps=config.max_qps,
                    mode=config.mode,
                )
                for (region, config), count in counts.items()
                if count > 0
            ),
            key=lambda a: (
                a.region,
                a.request_class,
                a.gpu_type,
                a.tensor_parallel,
                a.mode,
                a.clock_mhz or 0.0,
            ),
        )
    )
    shortfall = demand_shortfall(allocations, problem, partition)
    return Plan(
        status=status,
        objective=objective,
        tie_break=tie_break,
        partition=partition,
        thresholds=problem.partitions.get(partition),
        allocations=allocations,
        routing=routing_weights(allocations),
        costs=allocation_costs(problem, counts),
        epoch_s=problem.epoch_s,
        shortfall_qps=shortfall,
        solve_s=solve_s,
        build_s=build_s,
        solver=solver,
        mip_gap=mip_gap,
        notes=notes,
    )
