"""From live inputs to FREESH Eq. 1, and from its solution to the wire plan. Pure.

Live pools differ from FREESH's instances in one way: every worker of a pool serves every
class (the classifier routes classes to pools, not to instances). The problem therefore
plans each pool in *slices*, 1/K of an instance's time: a slice of a profile row serves
L̄/K QPS at P̃/K watts, the pool's inventory is K slices per worker, and the pool runs
⌈slices/K⌉ instances. K = 1 is FREESH's dedicated instance per class; a larger K stops a
small fleet from needing one whole instance per class. Each pool's slices are labelled with
the pool id as GPU type, so Eq. 1c's inventory is per pool (exact for a pool of one mode).

A pool runs at one clock: the highest clock the solution picked among its slices (every
class then gets at least its planned speed; power is charged at the rows' planned clocks, an
under-estimate when the clocks differ). TTFT and TBT are the rows' values weighted by planned
capacity. Routes: each class to the pools holding its slices, weighted by the capacity of
the instances the pool runs (its unassigned slices counted in its planned class mix, so every
pool meets a burst beyond the forecast with the same headroom); ``*`` (classes with no slice)
to every active pool by total capacity.

With exclusive class groups (:func:`input_groups`, the MILP's ``class_groups``) a class with
no slice is routed to the active pools of its own group instead of ``*``, so no pool is sent
a class of the other group (DynamoLLM's pools per request type).

With ``instance_idle_w`` (idle power of one instance per pool) the problem counts whole
instances (:class:`~services.planner.problem.InstanceUnit`): a slice then costs only the
power load adds above idle, each running instance its idle power, and pools of one (region,
GPU type) draw on one GPU group, so pools that are TP modes over the same GPUs (a TP4 and a
TP8 pool) compete for them and the MILP chooses the mode (DynamoLLM's and FREESH's modes).
With ``bare_w_per_gpu`` it also counts powered nodes (free GPUs on them draw bare power).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from proto.messages import Plan as WirePlan
from proto.messages import PoolPlan, RouteWeight
from services.planner.live_inputs import LivePool
from services.planner.live_profiles import scheme_name_for
from services.planner.plan_model import Allocation
from services.planner.plan_model import Plan as CorePlan
from services.planner.problem import (
    GpuGroup,
    InstanceUnit,
    IntensityUnit,
    PlanningProblem,
    ServingConfig,
    SloPolicy,
)

__all__ = [
    "LIVE_PARTITION",
    "PoolDecision",
    "bootstrap_plan",
    "build_live_problem",
    "input_groups",
    "merged_plan",
    "pool_allocations",
    "pool_decisions",
    "wire_plan",
    "with_added_instances",
]

LIVE_PARTITION = "live"
"""Partition label of pool-level allocations (the overhead gate compares whole pools)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolDecision:
    """What the plan asks of one live pool."""

    pool_id: str
    instances: int
    clock_mhz: float | None
    power_w: float
    """Planned power of the pool (Σ slices × P̃/K)."""
    capacity_by_class: Mapping[str, float]
    """QPS per class the pool's running instances serve: Σ slices × L̄/K, scaled by
    instances·K / Σ slices (the slices left unassigned on them, in the planned class mix)."""
    ttft_ms: float = 0.0
    tbt_ms: float = 0.0


def with_added_instances(
    decisions: Mapping[str, PoolDecision], added: Sequence[tuple[str, str]]
) -> dict[str, PoolDecision]:
    """The plan's decisions with SLO feedback's added instances (short pool, host): the
    host gets one more instance carrying one of the short pool's instances' worth of each of
    its classes' capacity and power, so routes by capacity send the host its share of those
    classes (the short pool's own, where the host is the pool itself). An instance added for
    a pool without planned instances has no capacity to copy and is skipped."""
    out = dict(decisions)
    for short, host in added:
        source = decisions.get(short)
        if source is None or source.instances <= 0:
            continue
        per = {cls: qps / source.instances for cls, qps in source.capacity_by_class.items()}
        was = out.get(host)
        if was is None:
            out[host] = replace(
                source,
                pool_id=host,
                instances=1,
                power_w=source.power_w / source.instances,
                capacity_by_class=per,
            )
            continue
        capacity = dict(was.capacity_by_class)
        for cls, qps in per.items():
            capacity[cls] = capacity.get(cls, 0.0) + qps
        out[host] = replace(
            was,
            instances=was.instances + 1,
            power_w=was.power_w + source.power_w / source.instances,
            capacity_by_class=capacity,
        )
    return out


def input_groups(classes: Sequence[str], labels: Sequence[str]) -> dict[str, str]:
    """Exclusive class groups by input length: the longest input bucket apart (``"long"``)
    from the others (``"short"``). Measured on the trace mix through the engine: a pool
    mixing every class holds short and medium requests' p99 TTFT at 1.2-5x their SLO at
    any load and clock (long prefills share their iterations), while either group alone
    meets it (docs/simulator.md, "Mixed-class capacity")."""
    return {cls: "long" if cls[0] == labels[-1] else "short" for cls in classes}


def _slice(
    config: ServingConfig, pool: LivePool, slices: int, idle_w: float = 0.0
) -> ServingConfig:
    return replace(
        config,
        gpu_type=pool.pool_id,
        gpus=1,
        power_w=max(0.0, config.power_w - idle_w) / slices,
        max_qps=config.max_qps / slices,
    )


def _units(
    pools: Mapping[str, LivePool],
    slices: int,
    idle_w: Mapping[str, float],
    shared_gpus: Mapping[tuple[str, str], int],
    node_gpus: int,
    bare_w_per_gpu: Mapping[str, float],
) -> tuple[tuple[InstanceUnit, ...], tuple[GpuGroup, ...]]:
    """One unit per pool, one GPU group per (region, GPU type) of the pools."""
    units = tuple(
        InstanceUnit(
            region=p.region,
            gpu_type=p.pool_id,
            slices=slices,
            gpus=p.tp,
            idle_w=idle_w[pid],
            group=p.gpu,
        )
        for pid, p in sorted(pools.items())
    )
    held: dict[tuple[str, str], int] = defaultdict(int)
    for p in pools.values():
        held[(p.region, p.gpu)] += p.gpus
    groups = tuple(
        GpuGroup(
            region=region,
            name=gpu,
            # Pools over the same GPUs (TP modes) name their shared count; else their sum.
            gpus=shared_gpus.get((region, gpu), gpus),
            node_gpus=node_gpus,
            bare_w_per_gpu=bare_w_per_gpu.get(gpu, 0.0),
        )
        for (region, gpu), gpus in sorted(held.items())
    )
    return units, groups


def build_live_problem(
    *,
    pools: Mapping[str, LivePool],
    profiles: Mapping[str, tuple[ServingConfig, ...]],
    demand_qps: Mapping[tuple[str, str], tuple[float, ...]],
    intensity: Mapping[str, tuple[float, ...]],
    step_s: float,
    alpha: float,
    slo: SloPolicy,
    slices: int,
    class_groups: Mapping[str, str] | None = None,
    instance_idle_w: Mapping[str, float] | None = None,
    shared_gpus: Mapping[tuple[str, str], int] | None = None,
    node_gpus: int = 8,
    bare_w_per_gpu: Mapping[str, float] | None = None,
) -> PlanningProblem:
    """Eq. 1 over the live pools (profiles keyed by pool id), in slices of 1/``slices``.

    ``class_groups`` (class → group) makes each pool serve one group's classes only.
    ``instance_idle_w`` (pool id → idle watts of one instance) plans whole instances;
    ``shared_gpus`` ((region, GPU type) → GPUs) is the inventory of pools that are modes
    over the same GPUs (default: the sum of the pools' own GPUs); ``node_gpus`` and
    ``bare_w_per_gpu`` (GPU type → watts of a GPU without a model on a powered node) add
    the powered nodes' cost.
    """
    idle = dict(instance_idle_w or {})
    configs = tuple(
        _slice(config, pools[pool_id], slices, idle.get(pool_id, 0.0))
        for pool_id, rows in sorted(profiles.items())
        if pool_id in pools
        for config in rows
    )
    units, groups = (
        _units(pools, slices, idle, shared_gpus or {}, node_gpus, bare_w_per_gpu or {})
        if instance_idle_w is not None
        else ((), ())
    )
    inventory = {(p.region, p.pool_id): len(p.workers) * slices for p in pools.values()}
    regions = tuple(sorted({p.region for p in pools.values()}))
    return PlanningProblem(
        regions=regions,
        configs=configs,
        inventory=inventory,
        demand_qps=dict(demand_qps),
        intensity={r: intensity[r] for r in regions},
        intensity_unit=IntensityUnit.G_PER_KWH,
        step_s=step_s,
        alpha=alpha,
        slo=slo,
        class_groups=dict(class_groups or {}),
        instance_units=units,
        gpu_groups=groups,
    )


def pool_decisions(
    plan: CorePlan, problem: PlanningProblem, pools: Mapping[str, LivePool], slices: int
) -> dict[str, PoolDecision]:
    """Instances, clock, power, capacity and latency per live pool from a slice-level plan."""
    rows = {
        (c.gpu_type, c.partition, c.request_class, c.mode, c.clock_mhz): c for c in problem.configs
    }
    by_pool: dict[str, list[Allocation]] = defaultdict(list)
    for a in plan.allocations:
        by_pool[a.gpu_type].append(a)
    idle = {u.gpu_type: u.idle_w for u in problem.instance_units}
    out: dict[str, PoolDecision] = {}
    for pool_id, pool in pools.items():
        allocs = by_pool.get(pool_id, [])
        capacity: dict[str, float] = defaultdict(float)
        ttft = tbt = 0.0
        for a in allocs:
            qps = a.instances * a.max_qps
            capacity[a.request_class] += qps
            row = rows.get((a.gpu_type, a.partition, a.request_class, a.mode, a.clock_mhz))
            if row is not None:
                ttft += qps * row.ttft_ms
                tbt += qps * row.tbt_ms
        assigned = sum(a.instances for a in allocs)
        instances = min(len(pool.workers), math.ceil(assigned / slices))
        if assigned > 0:
            # What the running instances serve: the slices the solution left unassigned on
            # them count too, in the pool's planned class mix. Routes by it give every pool
            # the same headroom, so a burst beyond the forecast does not land first on the
            # pool whose instances the solution happened to fill.
            scale = instances * slices / assigned
            capacity = defaultdict(float, {c: q * scale for c, q in capacity.items()})
        total = sum(capacity.values())
        # None is the GPU's maximum, so any None row makes the pool run at maximum.
        clocks = [a.clock_mhz for a in allocs if a.clock_mhz is not None]
        clock = max(clocks) if clocks and len(clocks) == len(allocs) else None
        out[pool_id] = PoolDecision(
            pool_id=pool_id,
            instances=instances,
            clock_mhz=clock,
            # With whole instances the rows carry only load power: add the idle power back.
            power_w=sum(a.instances * a.power_w for a in allocs)
            + instances * idle.get(pool_id, 0.0),
            capacity_by_class=dict(capacity),
            ttft_ms=ttft / total if total > 0 else 0.0,
            tbt_ms=tbt / total if total > 0 else 0.0,
        )
    return out


def pool_allocations(
    decisions: Mapping[str, PoolDecision], pools: Mapping[str, LivePool]
) -> tuple[Allocation, ...]:
    """One allocation per active pool, for the overhead gate (whole instances, one clock)."""
    return tuple(
        Allocation(
            region=pools[d.pool_id].region,
            partition=LIVE_PARTITION,
            request_class="*",
            gpu_type=d.pool_id,
            tensor_parallel=pools[d.pool_id].tp,
            clock_mhz=d.clock_mhz,
            instances=d.instances,
            gpus_per_instance=pools[d.pool_id].tp,
            power_w=d.power_w / d.instances,
            max_qps=sum(d.capacity_by_class.values()) / d.instances,
        )
        for d in decisions.values()
        if d.instances > 0 and d.pool_id in pools
    )


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
