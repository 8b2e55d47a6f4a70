"""A solver-free plan for when the MILP gives nothing: greedy cover, scaled to inventory.

Used only when the solver fails or stops at its time limit without any incumbent (the shortfall
MILP in :mod:`services.planner.milp` handles plain infeasibility). For each partition, classes
are served in order of decreasing peak demand; each takes instances from its cheapest
(region, configuration) per QPS of capacity (cost = objective coefficient) until α × peak is
covered or the GPUs run out. The partition with the least uncovered demand share wins, then the
lower cost. Never optimal, always fast and within inventory.

It keeps the MILP's hard rules that protect SLOs, since the live planner serves its plan:
one exclusive class group per (region, GPU type) (a pool beside long prefills misses the
short classes' TTFT) and each (class, region) capacity share, held as local capacity ≤
share × α·peak, which implies the MILP's share of total capacity whenever the class is
covered. One clock per pool (DynamoLLM Eq. 1) holds by construction: a pool's clocks need the
same GPUs, so a cover fills the cheapest clock's instances until the pool is full.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

from services.planner.milp_model import peak_demand
from services.planner.problem import Objective

if TYPE_CHECKING:
    from services.planner.problem import PlannerSettings, PlanningProblem, ServingConfig

__all__ = ["GreedyResult", "greedy_plan"]

GreedyResult = tuple[str, dict[tuple[str, "ServingConfig"], int]]
"""(chosen partition, instance counts per (region, configuration))."""


def _unit_cost(
    problem: PlanningProblem, region: str, config: ServingConfig, settings: PlannerSettings
) -> float:
    """Objective cost of one instance over the epoch; λ clamped at 0 (no fill here)."""
    if settings.objective is Objective.ENERGY:
        return config.power_w * problem.epoch_s
    weight = sum(max(v, 0.0) for v in problem.intensity[region])
    return config.power_w * problem.step_s * weight


def _cover_partition(
    problem: PlanningProblem,
    configs: tuple[ServingConfig, ...],
    partition: str,
    settings: PlannerSettings,
) -> tuple[float, float, dict[tuple[str, ServingConfig], int]]:
    free = dict(problem.inventory)
    counts: dict[tuple[str, ServingConfig], int] = defaultdict(int)
    group_of_pool: dict[tuple[str, str], str] = {}
    needs = {
        cls: need
        for (part, cls), need in peak_demand(problem).items()
        if part == partition and need > 0
    }
    uncovered_share = 0.0
    cost = 0.0
    for cls, need in sorted(needs.items(), key=lambda item: -item[1]):
        candidates = sorted(
            (
                (_unit_cost(problem, region, c, settings) / c.max_qps, region, c)
                for region in problem.regions
                for c in configs
                if c.partition == partition
                and c.request_class == cls
                and c.max_qps > 0
                and problem.region_share_limits.get((cls, region), 1.0) > 0
            ),
            key=lambda item: (item[0], item[1], item[2].mode, item[2].clock_mhz or 0.0),
        )
        remaining = need
        shares = {r: problem.region_share_limits.get((cls, r), 1.0) for r in problem.regions}
        local_room = {r: share * need if share < 1 else math.inf for r, share in shares.items()}
        group = problem.class_groups.get(cls)
        for per_qps, region, c in candidates:
            if remaining <= 1e-12:
                break
            pool = (region, c.gpu_type)
            if group is not None and group_of_pool.get(pool, group) != group:
                continue
            fit = free.get(pool, 0) // c.gpus
            wanted = min(remaining, local_room[region])
            take = min(fit, math.ceil(wanted / c.max_qps - 1e-9))
            if take > 0 and take * c.max_qps > local_room[region] + 1e-9:
                take -= 1  # the rounded-up instance would break the region's share
            if take <= 0:
                continue
            counts[(region, c)] += take
            free[pool] -= take * c.gpus
            remaining -= take * c.max_qps
            local_room[region] -= take * c.max_qps
            cost += per_qps * take * c.max_qps
            if group is not None:
                group_of_pool[pool] = group
        uncovered_share += max(remaining, 0.0) / need
    return uncovered_share, cost, dict(counts)


def greedy_plan(
    problem: PlanningProblem, configs: tuple[ServingConfig, ...], settings: PlannerSettings
) -> GreedyResult:
    """Return the best greedy cover over all partitions (least uncovered share, then cost).

    Args:
        problem: the epoch to plan.
        configs: SLO-eligible configurations.
        settings: objective used to rank configurations.
    """
    best: tuple[float, float, str, dict[tuple[str, ServingConfig], int]] | None = None
    for partition in problem.partition_names():
        share, cost, counts = _cover_partition(problem, configs, partition, settings)
        if best is None or (share, cost) < (best[0], best[1]):
            best = (share, cost, partition, counts)
    if best is None:
        return "", {}
    return best[2], best[3]
