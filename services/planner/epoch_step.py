"""One planning epoch as a pure step: the epoch's problem in, the pools' decisions out.

The live planner (:mod:`services.planner.live_service`) and the simulator's epoch planner
(:mod:`loadgen.simulator.planned`) each build the epoch's
:class:`~services.planner.problem.PlanningProblem` from what they observe (fleet, profiles,
demand forecast, carbon forecast; :func:`~services.planner.live_plan.build_live_problem`)
and both call :func:`step`: solve FREESH Eq. 1 with the clock dimension
(:func:`~services.planner.milp.solve_plan`), turn the slice-level solution into per-pool
instances, clocks and capacities (:func:`~services.planner.live_plan.pool_decisions`), and
order the pools for the fallback, cleanest region first. What each side does with the
decision (the overhead gate, the wire plan, starting instances) stays in its shell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.planner.live_inputs import LivePool
from services.planner.live_plan import PoolDecision, pool_decisions
from services.planner.milp import solve_plan
from services.planner.plan_model import Plan as CorePlan
from services.planner.problem import PlannerSettings, PlanningProblem

__all__ = ["EpochDecision", "step"]


@dataclass(frozen=True, slots=True)
class EpochDecision:
    """What one epoch's solve decided."""

    core: CorePlan
    """The MILP's slice-level solution (status, allocations, solve time)."""
    decisions: dict[str, PoolDecision]
    """Per pool: instances, clock cap, power, capacity per class."""
    fallback_order: tuple[str, ...]
    """Pool ids by the sum of their region's intensity forecast over the epoch, then id:
    where the classifier sends requests when a planned route is gone."""


def step(
    problem: PlanningProblem,
    settings: PlannerSettings,
    pools: Mapping[str, LivePool],
    slices: int,
    intensity: Mapping[str, Sequence[float]],
) -> EpochDecision:
    """Solve one epoch's problem and decide each pool.

    Args:
        problem: the epoch's Eq. 1 over ``pools``.
        settings: objective, solver and its limits.
        pools: the pools the problem was built over, by id.
        slices: time-share slices per instance (K of the problem).
        intensity: per region, the carbon forecast for each of the epoch's steps.
    """
    core = solve_plan(problem, settings)
    decisions = pool_decisions(core, problem, pools, slices)
    order = tuple(sorted(pools, key=lambda pid: (sum(intensity[pools[pid].region]), pid)))
    return EpochDecision(core, decisions, order)
