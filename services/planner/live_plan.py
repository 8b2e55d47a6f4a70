"""From live inputs to FREESH Eq. 1, and from its solution to per-pool decisions. Pure.

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
capacity. Each pool's capacity per class is that of the instances it runs (its unassigned
slices counted in its planned class mix), which :mod:`services.planner.plan_wire` turns
into the published plan's routes.

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

from services.planner.live_inputs import LivePool
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
    "build_live_problem",
    "input_groups",
    "pool_allocations",
    "pool_decisions",
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
