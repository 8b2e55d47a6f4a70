"""Whether the plan in force still covers a new forecast. Pure.

DynamoLLM's overhead gate (:mod:`services.planner.overhead_gate`) switches plans
unconditionally when the running plan no longer covers the forecast (FREESH Eq. 1b,
α·L̂ ≤ Σ x·L̄). The live planner (``live_service._keep_running``) and the simulator's gate
(``loadgen/simulator/gate.py``) judge that with this one definition, on what the plan's
running instances serve now:

* each row at the capacity the new problem gives it: re-measured profiles (a drifted
  mix) and SLO feedback's de-rating change what a row serves, and the plan's own
  allocations keep the capacities it was planned with (a row the problem no longer has
  keeps its planned capacity);
* each pool's rows scaled by ``instances·K / its assigned slices``: the slices the solution
  left unassigned on the pool's last instance serve too, in the pool's class mix, as its
  routes send them (:func:`services.planner.live_plan.pool_decisions`). Without them a
  forecast a little above the assigned load forced a switch the running instances did not
  need.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping

from services.planner.plan_model import Allocation, demand_shortfall
from services.planner.problem import PlanningProblem

__all__ = ["covers_forecast", "running_allocations"]


def running_allocations(
    allocations: tuple[Allocation, ...],
    instances: Mapping[str, int],
    slices: int,
    problem: PlanningProblem,
) -> tuple[Allocation, ...]:
    """The plan's slice allocations as its running instances serve them under ``problem``.

    Args:
        allocations: the plan's allocations (one per slice row; ``gpu_type`` is the pool).
        instances: running instances per pool (``PoolDecision.instances``).
        slices: time-share slices per instance (K).
        problem: the new problem, whose rows give the current capacities.
    """
    rows = {
        (c.gpu_type, c.partition, c.request_class, c.mode, c.clock_mhz): c.max_qps
        for c in problem.configs
    }
    assigned: dict[str, int] = defaultdict(int)
    for a in allocations:
        assigned[a.gpu_type] += a.instances
    out = []
    for a in allocations:
        share = assigned[a.gpu_type]
        scale = instances.get(a.gpu_type, 0) * slices / share if share > 0 else 0.0
        current = rows.get((a.gpu_type, a.partition, a.request_class, a.mode, a.clock_mhz))
        qps = a.max_qps if current is None else current
        out.append(dataclasses.replace(a, max_qps=qps * scale))
    return tuple(out)


def covers_forecast(
    allocations: tuple[Allocation, ...],
    instances: Mapping[str, int],
    slices: int,
    problem: PlanningProblem,
    partition: str,
) -> bool:
    """Whether the plan's running instances serve ``problem``'s forecast (α included) in
    every class of ``partition`` (:func:`running_allocations`)."""
    running = running_allocations(allocations, instances, slices, problem)
    return not demand_shortfall(running, problem, partition)
