"""DynamoLLM's reconfiguration overhead gate (seed 001 §2.3, Tables V–VI).

DynamoLLM reconfigures "only if the energy saved justifies the overheads and downtime" but gives
no formula (seed 001 §8.4). Ours, as the seed suggests: switch from the running plan to a new
one iff

    (P_old − P_new) × remaining epoch time  >  margin × transition cost,

or unconditionally when the running plan no longer covers the new forecast (SLO first). Power
and cost may be weighted per region (e.g. by carbon intensity) so the same rule gates the carbon
objective.

Transition cost, per (region, GPU type, TP, partition, class) pool: instances added and removed
at different clocks of the same pool are *re-clocked* (GPUs × ``reclock_j_per_gpu``: the
clock is set on every GPU of the instance, and throttLL'eM §3.3/§7 (seed 002) prices a
frequency set per GPU, 8 ms per GPU); the rest are started (``start_s`` × GPUs ×
``start_power_w_per_gpu``: loading weights and engine set-up while drawing power without
serving) or stopped (``stop_j``). Defaults: start 33 s = engine set-up 18 s + load weights 15 s
with weights cached locally (Table V), at 110 W per GPU (880 W per 8 loaded idle GPUs, Fig. 3);
re-clock ≈ 80 ms per GPU at that power (§4.3, ``nvidia-smi``; throttLL'eM's resident NVML
handle takes 8 ms). Replace them with measured values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.planner.plan_model import Allocation

__all__ = [
    "GateDecision",
    "PoolKey",
    "TransitionCosts",
    "TransitionCount",
    "count_transitions",
    "gate_plans",
    "reconfiguration_gate",
    "transition_cost",
]

PoolKey = tuple[str, str, int, str, str]
"""(region, GPU type, TP, partition, class): instances that differ only by clock."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransitionCosts:
    """Energy cost of changing instances (configured or measured)."""

    start_s: float = 33.0
    start_power_w_per_gpu: float = 110.0
    stop_j: float = 0.0
    reclock_j_per_gpu: float = 0.08 * 110.0
    """Energy of one clock set on one GPU (throttLL'eM §3.3/§7: a frequency set costs per GPU)."""

    def start_j(self, gpus: int) -> float:
        """Energy to bring up one instance of ``gpus`` GPUs."""
        return self.start_s * gpus * self.start_power_w_per_gpu

    def reclock_j(self, gpus: int) -> float:
        """Energy to re-clock one instance of ``gpus`` GPUs: its clock is set on each of them
        (throttLL'eM §3.3: the same frequency goes to all GPUs of the instance)."""
        return gpus * self.reclock_j_per_gpu


@dataclass(frozen=True, slots=True, kw_only=True)
class TransitionCount:
    """Instances started, stopped and re-clocked in one pool."""

    starts: int
    stops: int
    reclocks: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GateDecision:
    """Outcome of the gate, with the numbers behind it."""

    reconfigure: bool
    saving: float
    """(rate_old − rate_new) × remaining_s, in the cost unit (J when unweighted)."""
    transition_cost: float
    reason: str


def _pool(a: Allocation) -> PoolKey:
    return (a.region, a.gpu_type, a.tensor_parallel, a.partition, a.request_class)


def count_transitions(
    old: tuple[Allocation, ...], new: tuple[Allocation, ...]
) -> dict[PoolKey, TransitionCount]:
    """Starts, stops and re-clocks per pool to go from ``old`` to ``new`` allocations."""
    delta: dict[PoolKey, dict[float | None, int]] = defaultdict(lambda: defaultdict(int))
    for a in old:
        delta[_pool(a)][a.clock_mhz] -= a.instances
    for a in new:
        delta[_pool(a)][a.clock_mhz] += a.instances
    counts: dict[PoolKey, TransitionCount] = {}
    for pool, by_clock in delta.items():
        added = sum(d for d in by_clock.values() if d > 0)
        removed = -sum(d for d in by_clock.values() if d < 0)
        reclocks = min(added, removed)
        if added or removed:
            counts[pool] = TransitionCount(
                starts=added - reclocks, stops=removed - reclocks, reclocks=reclocks
            )
    return counts


def transition_cost(
    old: tuple[Allocation, ...],
    new: tuple[Allocation, ...],
    costs: TransitionCosts,
    region_weight: Mapping[str, float] | None = None,
) -> float:
    """Cost of the transition, in J (or J × region weight, e.g. kg CO2 per J).

    A start or a re-clock is charged for the GPUs one instance occupies (``gpus_per_instance``
    of the new allocation, G_{m,c} of FREESH Eq. 1c), not its TP degree: the two differ for a
    mode whose instance holds more GPUs than its TP group (e.g. a disaggregated mode). A
    re-clock sets the clock of every one of those GPUs (throttLL'eM §3.3/§7, 8 ms per GPU).
    """
    gpus: dict[PoolKey, int] = {}
    for a in (*old, *new):  # new last: starts and re-clocks are instances of the new ones
        gpus[_pool(a)] = a.gpus_per_instance
    total = 0.0
    for pool, n in count_transitions(old, new).items():
        region = pool[0]
        energy = (
            n.starts * costs.start_j(gpus[pool])
            + n.stops * costs.stop_j
            + n.reclocks * costs.reclock_j(gpus[pool])
        )
        total += energy * (region_weight or {}).get(region, 1.0)
    return total


def reconfiguration_gate(
    *,
    old_rate: float,
    new_rate: float,
    remaining_s: float,
    transition: float,
    old_covers_demand: bool = True,
    margin: float = 1.0,
) -> GateDecision:
    """Decide whether to switch plans (DynamoLLM §2.3 with the seed's formula).

    Args:
        old_rate: cost per second of the running plan (W, or weighted W).
        new_rate: cost per second of the candidate plan, same unit.
        remaining_s: time left in the epoch the new plan would run.
        transition: cost of the switch, in rate-unit × seconds.
        old_covers_demand: False forces a switch: the running plan misses the forecast.
        margin: required ratio of saving to cost (> 1 adds hysteresis).
    """
    saving = (old_rate - new_rate) * max(remaining_s, 0.0)
    if not old_covers_demand:
        return GateDecision(
            reconfigure=True, saving=saving, transition_cost=transition,
            reason="running plan no longer covers forecast demand",
        )  # fmt: skip
    if saving > margin * transition:
        return GateDecision(
            reconfigure=True, saving=saving, transition_cost=transition,
            reason=f"saving {saving:.4g} > {margin:g} × cost {transition:.4g}",
        )  # fmt: skip
    return GateDecision(
        reconfigure=False, saving=saving, transition_cost=transition,
        reason=f"saving {saving:.4g} <= {margin:g} × cost {transition:.4g}",
    )  # fmt: skip


def _rate(allocations: tuple[Allocation, ...], region_weight: Mapping[str, float] | None) -> float:
    return sum(
        a.instances * a.power_w * (region_weight or {}).get(a.region, 1.0) for a in allocations
    )


def gate_plans(
    old: tuple[Allocation, ...],
    new: tuple[Allocation, ...],
    *,
    remaining_s: float,
    costs: TransitionCosts | None = None,
    old_covers_demand: bool = True,
    region_weight: Mapping[str, float] | None = None,
    margin: float = 1.0,
) -> GateDecision:
    """Gate a switch between two allocations: power rates and transition cost from the plans.

    ``region_weight`` (e.g. forecast intensity per region in kg per J) turns the energy gate
    into a carbon gate; without it everything is in joules.
    """
    return reconfiguration_gate(
        old_rate=_rate(old, region_weight),
        new_rate=_rate(new, region_weight),
        remaining_s=remaining_s,
        transition=transition_cost(old, new, costs or TransitionCosts(), region_weight),
        old_covers_demand=old_covers_demand,
        margin=margin,
    )
