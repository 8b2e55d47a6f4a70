"""Whether the plan in force still covers a new forecast. Pure.

DynamoLLM's overhead gate (:mod:`services.planner.overhead_gate`) switches plans
unconditionally when the running plan no longer covers the forecast (FREESH Eq. 1b,
α·L̂ ≤ Σ x·L̄). The live planner (``live_service._keep_running``) and the simulator's gate
(``loadgen/simulator/gate.py``) judge that with this one definition, on what the plan's
running instances can serve now:

* **their whole time**: a pool runs ``instances`` × K slices, the ones the solution left
  unassigned on its last instance included;
* **in any class mix of the pool's group**: a pool serves every class its routes send it
  (its class group's, :func:`services.planner.plan_wire.wire_plan`), and routes follow the
  plan's capacities, so the running plan covers the forecast when *some* split of each
  pool's slices over the classes its group serves covers every class's α × peak (a small
  LP). The solution's own split is one of many: checked class by class against it, a mix
  that shifted within the same total forced a re-plan the running instances did not need;
* **at the rows' current capacities**: re-measured profiles (a drifted mix) and SLO
  feedback's de-rating change what a row serves; a row the problem no longer offers keeps
  the capacity it was planned with.

A re-plan within the epoch that this test forces may only add (:func:`adding_only`): the
load that forced it is there now, and a solution that moves a region's GPUs to another TP
mode drains running instances before the new ones are ready (DynamoLLM §4.2: without
spare capacity the old instance goes first), taking capacity away from that very load.
Moves between modes wait for the epoch's re-plan (DynamoLLM's TP split is its pool
level, not its emergency path).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from services.planner.plan_model import Allocation
from services.planner.problem import PlanningProblem
from services.planner.slo_filter import eligible_configs

__all__ = ["adding_only", "covers_forecast", "pool_rows", "replan_problem"]


def pool_rows(
    allocations: tuple[Allocation, ...], problem: PlanningProblem, partition: str
) -> dict[str, dict[str, float]]:
    """Per running pool: QPS of one slice per class it may serve, at the pool's clock.

    A pool's clock and mode are its allocations' (the highest clock, ``None`` when any is at
    the maximum: :func:`~services.planner.live_plan.pool_decisions`); the classes are those
    of its allocations' class groups (every class the problem has rows for when it has no
    groups); each class's capacity is the problem's eligible row at that clock, else the
    allocation's own.
    """
    by_pool: dict[str, list[Allocation]] = defaultdict(list)
    for a in allocations:
        if a.partition == partition and a.instances > 0:
            by_pool[a.gpu_type].append(a)
    eligible, _ = eligible_configs(problem.configs, problem.slo)
    groups = problem.class_groups
    out: dict[str, dict[str, float]] = {}
    for pool, allocs in by_pool.items():
        clocks = [a.clock_mhz for a in allocs]
        clock = None if any(c is None for c in clocks) else max(c for c in clocks if c is not None)
        modes = {a.mode for a in allocs}
        served = {groups.get(a.request_class) for a in allocs}
        rows: dict[str, float] = {}
        for c in eligible:
            if (
                c.gpu_type == pool
                and c.partition == partition
                and c.mode in modes
                and c.clock_mhz == clock
                and (not groups or groups.get(c.request_class) in served)
            ):
                rows[c.request_class] = max(rows.get(c.request_class, 0.0), c.max_qps)
        for a in allocs:
            rows.setdefault(a.request_class, a.max_qps)
        out[pool] = rows
    return out


def covers_forecast(
    allocations: tuple[Allocation, ...],
    instances: Mapping[str, int],
    slices: int,
    problem: PlanningProblem,
    partition: str,
) -> bool:
    """Whether the plan's running instances serve ``problem``'s forecast (α × each class's
    peak) of ``partition`` in some split of their slices over the classes they serve.

    Args:
        allocations: the plan's allocations (one per slice row; ``gpu_type`` is the pool).
        instances: running instances per pool (``PoolDecision.instances``).
        slices: time-share slices per instance (K).
        problem: the new problem: its forecast, α, rows and class groups.
        partition: the plan's partition.
    """
    need = {
        cls: problem.alpha * max(series)
        for (part, cls), series in problem.demand_qps.items()
        if part == partition and series and max(series) > 1e-12
    }
    if not need:
        return True
    rows = pool_rows(allocations, problem, partition)
    pools = [p for p in sorted(rows) if instances.get(p, 0) > 0]
    keys = [(p, cls) for p in pools for cls in sorted(rows[p]) if rows[p][cls] > 0]
    if any(not any(cls == k[1] for k in keys) for cls in need):
        return False  # a class with demand that no running pool serves
    index = {k: i for i, k in enumerate(keys)}
    classes = sorted(need)
    a_ub = np.zeros((len(pools) + len(classes), len(keys)))
    b_ub = np.zeros(len(pools) + len(classes))
    for row, pool in enumerate(pools):
        for cls in rows[pool]:
            if (pool, cls) in index:
                a_ub[row, index[(pool, cls)]] = 1.0
        b_ub[row] = instances[pool] * slices
    for offset, cls in enumerate(classes):
        row = len(pools) + offset
        for pool in pools:
            if (pool, cls) in index:
                a_ub[row, index[(pool, cls)]] = -rows[pool][cls]
        b_ub[row] = -need[cls] * (1.0 - 1e-9)
    # Imported here: scipy.optimize adds a third of a second to the planner's start, and only
    # a gate decision needs it.
    from scipy.optimize import linprog

    result = linprog(np.zeros(len(keys)), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    return bool(result.status == 0)


def adding_only(problem: PlanningProblem, instances: Mapping[str, int]) -> PlanningProblem:
    """``problem`` whose solutions hold the GPUs of the running ``instances`` of every pool
    (``PlanningProblem.min_instances``): new instances go where GPUs are free, in any
    region, so no TP-mode switch waits for running instances to drain; a running instance
    the solution leaves without load drains only once the new ones are ready (make before
    break, as for every plan)."""
    return dataclasses.replace(
        problem, min_instances={pool: n for pool, n in sorted(instances.items()) if n > 0}
    )


def replan_problem(
    problem: PlanningProblem,
    allocations: tuple[Allocation, ...],
    instances: Mapping[str, int],
    slices: int,
    partition: str,
    *,
    within_epoch: bool,
) -> tuple[bool, PlanningProblem]:
    """Whether the plan in force (``allocations`` over its running ``instances``) still
    covers ``problem``'s forecast, and the problem a re-plan solves: :func:`adding_only`
    when it does not and the re-plan falls within the epoch the plan belongs to. The live
    planner and the simulator both decide with it; the coverage is then handed to the
    overhead gate, so it is computed once per re-plan."""
    covers = covers_forecast(allocations, instances, slices, problem, partition)
    if not covers and within_epoch:
        problem = adding_only(problem, instances)
    return covers, problem
