"""From per-pool decisions to the published plan: pools, instances and routes. Pure.

Routes: each class to the pools holding its slices, weighted by the capacity of the
instances the pool runs (:class:`~services.planner.live_plan.PoolDecision`'s
``capacity_by_class``: its unassigned slices counted in its planned class mix, so every
pool meets a burst beyond the forecast with the same headroom); ``*`` (classes with no
slice) to every active pool by total capacity.

With exclusive class groups (:func:`~services.planner.live_plan.input_groups`, the MILP's
``class_groups``) a class with no slice is routed to the active pools of its own group
instead of ``*``, so no pool is sent a class of the other group (DynamoLLM's pools per
request type).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from proto.messages import Plan as WirePlan
from proto.messages import PoolPlan, RouteWeight
from services.planner.live_inputs import LivePool
from services.planner.live_plan import PoolDecision
from services.planner.live_profiles import scheme_name_for

__all__ = ["bootstrap_plan", "merged_plan", "wire_plan"]


def _group_routes(
    routes: dict[str, list[RouteWeight]],
    decisions: Mapping[str, PoolDecision],
    totals: Mapping[str, float],
    class_groups: Mapping[str, str],
) -> None:
    """Route each grouped class with no planned capacity to its group's pools (in place).

    A pool belongs to a group when every class it holds capacity for is of that group (the
    MILP's exclusive-group constraint makes that true of every planned pool). A group with
    no such pool leaves its unplanned classes on ``*``.
    """
    by_group: dict[str, list[RouteWeight]] = defaultdict(list)
    for pool_id, total in sorted(totals.items()):
        capacity = decisions[pool_id].capacity_by_class if pool_id in decisions else {}
        held = {class_groups.get(c, "") for c, q in capacity.items() if q > 0}
        if total > 0 and len(held) == 1 and "" not in held:
            by_group[held.pop()].append(RouteWeight(pool_id=pool_id, weight=total))
    for cls, group in sorted(class_groups.items()):
        if cls not in routes and by_group.get(group):
            routes[cls] = list(by_group[group])


def _pool_plan(
    pool: LivePool, decision: PoolDecision | None, instances: int, routed: list[str]
) -> PoolPlan:
    planned = set(decision.capacity_by_class) if decision else set()
    return PoolPlan(
        pool_id=pool.pool_id,
        region=pool.region,
        gpu=pool.gpu,
        tp=pool.tp,
        instances=instances,
        clock_mhz=decision.clock_mhz if decision else None,
        classes=sorted(planned | set(routed)),
        ttft_ms=decision.ttft_ms if decision else 0.0,
        tbt_ms=decision.tbt_ms if decision else 0.0,
        model=pool.model,
    )


def wire_plan(
    *,
    decisions: Mapping[str, PoolDecision],
    pools: Mapping[str, LivePool],
    partition: str,
    epoch: int,
    issued_at: float,
    valid_until: float,
    objective: str,
    status: str,
    keep_one: frozenset[str] = frozenset(),
    fallback_order: tuple[str, ...] = (),
    class_groups: Mapping[str, str] | None = None,
) -> WirePlan:
    """The published plan: every live pool, planned instances, routes by planned capacity.

    Pools in ``keep_one`` keep one active instance even when planned to zero (their queue
    still holds work). The route table is never empty: with no planned capacity at all the
    first pool of ``fallback_order`` (e.g. lowest intensity) gets one instance and ``*``.
    With ``class_groups`` (class → group, as given to the MILP) a grouped class without
    planned capacity is routed to the active pools planned for its group alone (by their
    capacity), not to ``*``; each pool's ``classes`` lists what its routes send it.
    """
    routes: dict[str, list[RouteWeight]] = defaultdict(list)
    totals: dict[str, float] = {}
    for pool_id, d in sorted(decisions.items()):
        if pool_id not in pools or d.instances <= 0:
            continue
        for cls, qps in sorted(d.capacity_by_class.items()):
            if qps > 0:
                routes[cls].append(RouteWeight(pool_id=pool_id, weight=qps))
        totals[pool_id] = sum(d.capacity_by_class.values())
    instances = {pid: (decisions[pid].instances if pid in decisions else 0) for pid in pools}
    if not any(w > 0 for w in totals.values()):
        chosen = next((p for p in fallback_order if p in pools), min(pools, default=None))
        if chosen is not None:
            totals = {chosen: 1.0}
            instances[chosen] = max(1, instances[chosen])
    routes["*"] = [RouteWeight(pool_id=p, weight=w) for p, w in sorted(totals.items()) if w > 0]
    if class_groups:
        _group_routes(routes, decisions, totals, class_groups)
    for pool_id in keep_one:
        if pool_id in instances and pools[pool_id].workers:
            instances[pool_id] = max(1, instances[pool_id])
    routed: dict[str, list[str]] = defaultdict(list)
    for cls, weights in sorted(routes.items()):
        if cls != "*":
            for w in weights:
                routed[w.pool_id].append(cls)
    return WirePlan(
        epoch=epoch,
        issued_at=issued_at,
        valid_until=valid_until,
        scheme=scheme_name_for(partition),
        pools=[
            _pool_plan(p, decisions.get(pid), instances[pid], routed.get(pid, []))
            for pid, p in sorted(pools.items())
        ],
        routes=dict(routes),
        objective=objective,
        status=status,
    )


def bootstrap_plan(
    pools: Mapping[str, LivePool], *, scheme: str, epoch: int, issued_at: float, valid_until: float
) -> WirePlan:
    """Every registered worker active at its maximum clock, classes spread by worker count.

    Used until the planner has seen demand, profiles and the fleet; workers never park on it.
    """
    return WirePlan(
        epoch=epoch,
        issued_at=issued_at,
        valid_until=valid_until,
        scheme=scheme,
        pools=[
            PoolPlan(
                pool_id=p.pool_id,
                region=p.region,
                gpu=p.gpu,
                tp=p.tp,
                instances=len(p.workers),
                model=p.model,
            )
            for _, p in sorted(pools.items())
        ],
        routes={
            "*": [
                RouteWeight(pool_id=pid, weight=float(len(p.workers)))
                for pid, p in sorted(pools.items())
                if p.workers
            ]
        },
        objective="bootstrap",
    )


def merged_plan(plans: Sequence[WirePlan]) -> WirePlan:
    """One published plan of the per-model plans (each over its own model's pools).

    Pools are disjoint (a pool serves one model), so their lists and each class's routes
    are concatenated: the classifier routes a request among its own model's pools only
    (``PoolPlan.model``), so one model's weights never compete with another's. The plan
    carries one class scheme, the first plan's; a model planned under another scheme keeps
    only its default route ``*`` (its class names mean nothing under the first scheme).

    Raises:
        ValueError: no plan.
    """
    if not plans:
        raise ValueError("no plan to merge")
    first = plans[0]
    routes: dict[str, list[RouteWeight]] = defaultdict(list)
    for plan in plans:
        for cls, weights in plan.routes.items():
            if plan.scheme == first.scheme or cls == "*":
                routes[cls].extend(weights)
    statuses = [p.status for p in plans if p.status != "ok"]
    objectives = sorted({p.objective for p in plans})
    return WirePlan(
        epoch=first.epoch,
        issued_at=first.issued_at,
        valid_until=first.valid_until,
        scheme=first.scheme,
        pools=[pool for plan in plans for pool in plan.pools],
        routes=dict(routes),
        objective=objectives[0] if len(objectives) == 1 else "+".join(objectives),
        status=statuses[0] if statuses else "ok",
    )
