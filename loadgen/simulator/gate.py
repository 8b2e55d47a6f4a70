"""DynamoLLM's overhead gate for the simulator's epoch planner (the live planner's rule).

The live ``milp`` planner (``services/planner/live_service.py``, ``_keep_running``) compares
every new solution with the plan in force through :mod:`services.planner.overhead_gate`
(seed 001 §2.3; the formula is the seed's suggestion, §8.4): switch iff

    (P_old − P_new) × remaining epoch time  >  margin × transition cost,

or unconditionally when the running plan no longer covers the new forecast
(:func:`services.planner.plan_coverage.covers_forecast`, which the planner computes once
per re-plan and hands in). Under the carbon objective rates
and costs are weighted by each region's mean forecast intensity over the epoch, as live.

The simulator uses the same cores (:func:`~services.planner.live_plan.pool_allocations`,
:func:`~services.planner.overhead_gate.count_transitions`,
:func:`~services.planner.overhead_gate.reconfiguration_gate`) with two inputs of its own:

* the transition cost is what the simulator itself charges for it: a started instance draws
  its engine's idle power for ``delays.instance_start_s`` before it serves, a re-clocked one
  stalls at idle power for ``delays.clock_change_s``, a stopped one costs nothing (live takes
  the same rule with configured values, ``planner.start_s`` and ``start_power_w_per_gpu``);
* ``remaining_s`` is the time left to the next epoch boundary (the whole epoch for the live
  planner, which only plans at boundaries; shorter for the simulator's event re-plans).

A rejected solution leaves the plan in force untouched (instances, routes, clock caps).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from services.planner.live_plan import pool_allocations
from services.planner.overhead_gate import GateDecision, count_transitions, reconfiguration_gate
from services.planner.problem import Objective
from shared.engine import EngineConfig, create_engine

if TYPE_CHECKING:
    from loadgen.simulator.planned import EpochPlanner
    from services.planner.live_plan import PoolDecision
    from services.planner.plan_model import Allocation
    from services.planner.plan_model import Plan as CorePlan

__all__ = ["PlanGate", "instance_idle_w"]


@functools.lru_cache(maxsize=32)
def instance_idle_w(config: EngineConfig) -> float:
    """Idle power of one instance of ``config`` on the calibrated engine (all its GPUs)."""
    engine: Any = create_engine(config)
    return float(engine.idle_power_w)


class PlanGate:
    """Keeps the plan in force and decides whether a new solution replaces it."""

    def __init__(self, planner: EpochPlanner) -> None:
        """Bind to one simulation's epoch planner; nothing is in force yet."""
        self.planner = planner
        self.running: tuple[CorePlan, dict[str, PoolDecision]] | None = None

    def admit(
        self,
        core: CorePlan,
        decisions: Mapping[str, PoolDecision],
        intensity: Mapping[str, tuple[float, ...]],
        t_s: float,
        *,
        old_covers: bool,
    ) -> bool:
        """Whether to apply this solution; logs the gate's numbers in the planner's solve.
        ``old_covers``: whether the plan in force covers the new forecast
        (:func:`~services.planner.plan_coverage.covers_forecast`, computed by the caller).

        The first solution, and every one when the policy has ``overhead_gate = False``, is
        applied without a comparison (the live planner gates only against a running plan).
        """
        planner = self.planner
        old = self.running
        gated = planner.view.policy.overhead_gate
        if old is None or not gated or old[0].partition != core.partition:
            self.running = (core, dict(decisions))
            return True
        decision = self.decide(old, core, decisions, intensity, t_s, old_covers=old_covers)
        if planner.solves:
            planner.solves[-1]["gate"] = {
                "reconfigure": decision.reconfigure,
                "saving": decision.saving,
                "transition_cost": decision.transition_cost,
                "reason": decision.reason,
            }
        if decision.reconfigure:
            self.running = (core, dict(decisions))
        return decision.reconfigure

    def decide(
        self,
        old: tuple[CorePlan, Mapping[str, PoolDecision]],
        core: CorePlan,
        decisions: Mapping[str, PoolDecision],
        intensity: Mapping[str, tuple[float, ...]],
        t_s: float,
        *,
        old_covers: bool,
    ) -> GateDecision:
        """DynamoLLM's gate between the plan in force (``old``) and a new solution."""
        planner = self.planner
        weight: dict[str, float] | None = None
        if planner.objective == Objective.CARBON:
            weight = {r: sum(v) / len(v) for r, v in intensity.items()}
        before = pool_allocations(old[1], planner.pools)
        after = pool_allocations(decisions, planner.pools)
        epoch = planner.epoch_s
        return reconfiguration_gate(
            old_rate=_rate(before, weight),
            new_rate=_rate(after, weight),
            remaining_s=(math.floor(t_s / epoch) + 1) * epoch - t_s,
            transition=self.transition_cost(before, after, weight),
            old_covers_demand=old_covers,
            margin=planner.live.gate_margin,
        )

    def transition_cost(
        self,
        old: tuple[Allocation, ...],
        new: tuple[Allocation, ...],
        weight: Mapping[str, float] | None,
    ) -> float:
        """What the simulator charges for the switch: idle power while starting/re-clocking."""
        view = self.planner.view
        delays = view.scenario.delays
        total = 0.0
        # pool_allocations keys each live pool by its id in the GPU-type field.
        for (region, pool_id, _, _, _), n in count_transitions(old, new).items():
            idle = instance_idle_w(view.pool_by_id[pool_id].config)
            seconds = n.starts * delays.instance_start_s + n.reclocks * delays.clock_change_s
            joules = idle * seconds
            total += joules * (weight or {}).get(region, 1.0)
        return total


def _rate(allocations: tuple[Allocation, ...], weight: Mapping[str, float] | None) -> float:
    """Power (or weighted power) of a plan: Σ instances × P̃ (as the live gate's rate)."""
    return sum(a.instances * a.power_w * (weight or {}).get(a.region, 1.0) for a in allocations)
