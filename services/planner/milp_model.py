"""Build FREESH Eq. 1 (with DynamoLLM's clock dimension) as a pulp model.

Linearisation (seed 000 §1.4, repo practice, tightened):

- x_{n,i} ∈ ℕ per region n and eligible configuration i = (partition, class, GPU, TP, clock);
  its upper bound is the number of instances that fit the region's GPUs of that type, which
  doubles as a per-variable big-M (tighter than the repo's 10 000, same feasible set).
- q_s ∈ {0,1} per partition with Σ q_s = 1 (1f) and x ≤ ub·q_s (1d); omitted with one partition.
- Demand (1b): Σ_{n,m} x·L̄ ≥ α·L̂_{s,r,t}·q_s for every step t. Worker counts are constant over
  the epoch, so the steps collapse to the peak step: one row per (s, r).
- Inventory (1c): Σ x·G ≤ Ḡ per (n, GPU type). TP degrees 2/4/8 all divide an 8-GPU node, so a
  GPU count that fits also packs into nodes (first-fit decreasing on divisible sizes).
- Objectives in kg CO2 and Wh (not raw λ·W·s ≈ 1e10) to keep the solver's numerics sane.
- Optional whole instances (``PlanningProblem.instance_units``): an integer n per (region,
  configuration label) with Σ slices ≤ slices·n, Σ n·G ≤ GPUs of the shared group (TP modes
  over the same GPUs), n·idle power in the objective, and an integer count of powered nodes
  per group whose GPUs without an instance draw bare idle power.
- Optional: shortfall u_{s,r} ≥ 0 on the demand rows (infeasible fallback), one clock per pool
  (DynamoLLM Eq. 1; binaries y per pool and clock), per-(class, region) capacity shares, and
  exclusive class groups per (region, GPU type) (binaries per group, at most one chosen).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulp

from services.planner.plan_model import JOULES_PER_MWH

if TYPE_CHECKING:
    from services.planner.problem import PlannerSettings, PlanningProblem, ServingConfig

__all__ = ["PlannerModel", "build_model", "peak_demand"]

XKey = tuple[str, "ServingConfig"]
"""(region, configuration): index of one integer variable."""


@dataclass(slots=True)
class PlannerModel:
    """A pulp problem plus handles on its variables and metric expressions."""

    problem: pulp.LpProblem
    x: dict[XKey, pulp.LpVariable]
    q: dict[str, pulp.LpVariable]
    """Partition binaries; empty when there is a single partition."""
    energy_wh: pulp.LpAffineExpression
    carbon_kg: pulp.LpAffineExpression
    """Emissions with the true λ (negative rates count as avoided)."""
    carbon_objective_kg: pulp.LpAffineExpression
    """Emissions as the objective sees them (λ clamped at 0 when fill is off)."""
    shortfall_share: pulp.LpAffineExpression | None = None
    """Σ u_{s,r} / (α·peak_{s,r}); only in the fallback model."""
    shortfall: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)


def peak_demand(problem: PlanningProblem) -> dict[tuple[str, str], float]:
    """α × peak forecast QPS per (partition, class) over the epoch's steps."""
    return {key: problem.alpha * max(series) for key, series in problem.demand_qps.items()}


def _instance_bounds(
    problem: PlanningProblem, configs: tuple[ServingConfig, ...]
) -> dict[XKey, int]:
    bounds: dict[XKey, int] = {}
    for region in problem.regions:
        for config in configs:
            limit = problem.region_share_limits.get((config.request_class, region))
            if limit is not None and limit <= 0:
                continue
            fit = problem.inventory.get((region, config.gpu_type), 0) // config.gpus
            if fit >= 1:
                bounds[(region, config)] = fit
    return bounds


def build_model(
    problem: PlanningProblem,
    configs: tuple[ServingConfig, ...],
    settings: PlannerSettings,
    *,
    with_shortfall: bool = False,
) -> PlannerModel:
    """Build Eq. 1 over the SLO-eligible ``configs`` (objective not yet set).

    Args:
        problem: the epoch to plan.
        configs: configurations that passed the SLO filter (Eq. 1e).
        settings: solver settings (fill policy, clock-per-pool option).
        with_shortfall: add slack on the demand rows so the model is always feasible.
    """
    lp = pulp.LpProblem("greenserve_epoch_plan", pulp.LpMinimize)
    bounds = _instance_bounds(problem, configs)
    # Deterministic variable names keep solver behaviour reproducible across runs.
    x = {
        key: pulp.LpVariable(f"x{index}", lowBound=0, upBound=ub, cat=pulp.LpInteger)
        for index, (key, ub) in enumerate(bounds.items())
    }
    partitions = problem.partition_names()
    q: dict[str, pulp.LpVariable] = {}
    if len(partitions) > 1:
        q = {
            s: pulp.LpVariable(f"q{index}", cat=pulp.LpBinary) for index, s in enumerate(partitions)
        }
        lp += pulp.lpSum(q.values()) == 1, "one_partition"
        for (region, config), var in x.items():
            lp += var <= bounds[(region, config)] * q[config.partition]

    # Demand rows (1b), collapsed to the peak step.
    capacity: dict[tuple[str, str], list[tuple[pulp.LpVariable, float]]] = defaultdict(list)
    for (_, config), var in x.items():
        if config.max_qps > 0:
            capacity[(config.partition, config.request_class)].append((var, config.max_qps))
    shortfall: dict[tuple[str, str], pulp.LpVariable] = {}
    shortfall_terms = []
    for index, ((partition, cls), need) in enumerate(sorted(peak_demand(problem).items())):
        if need <= 0 or partition not in partitions:
            continue
        supply = pulp.LpAffineExpression(capacity.get((partition, cls), []))
        if with_shortfall:
            slack = pulp.LpVariable(f"u{index}", lowBound=0)
            shortfall[(partition, cls)] = slack
            shortfall_terms.append((slack, 1.0 / need))
            supply = supply + slack
        required = need * q[partition] if q else need
        lp += supply >= required, f"demand_{index}"

    # GPU inventory (1c).
    gpus: dict[tuple[str, str], list[tuple[pulp.LpVariable, float]]] = defaultdict(list)
    for (region, config), var in x.items():
        gpus[(region, config.gpu_type)].append((var, float(config.gpus)))
    for index, (key, terms) in enumerate(sorted(gpus.items())):
        lp += pulp.LpAffineExpression(terms) <= problem.inventory.get(key, 0), f"inventory_{index}"

    if settings.single_clock_per_pool:
        _add_single_clock(lp, x, bounds)
    _add_region_shares(lp, problem, x)
    _add_class_groups(lp, problem, x, bounds)
    powered = [(region, c.power_w, var) for (region, c), var in x.items()]
    powered += _add_instance_units(lp, problem, x)

    kg = problem.intensity_unit.kg_per_mwh / JOULES_PER_MWH
    energy_terms, carbon_terms, objective_terms = [], [], []
    for region, power_w, var in powered:
        lam = problem.intensity[region]
        energy_terms.append((var, power_w * problem.epoch_s / 3600.0))
        carbon_terms.append((var, power_w * problem.step_s * sum(lam) * kg))
        seen = lam if settings.negative_intensity_fill else [max(v, 0.0) for v in lam]
        objective_terms.append((var, power_w * problem.step_s * sum(seen) * kg))
    return PlannerModel(
        problem=lp,
        x=x,
        q=q,
        energy_wh=pulp.LpAffineExpression(energy_terms),
        carbon_kg=pulp.LpAffineExpression(carbon_terms),
        carbon_objective_kg=pulp.LpAffineExpression(objective_terms),
        shortfall_share=pulp.LpAffineExpression(shortfall_terms) if with_shortfall else None,
        shortfall=shortfall,
    )


def _add_instance_units(
    lp: pulp.LpProblem, problem: PlanningProblem, x: dict[XKey, pulp.LpVariable]
) -> list[tuple[str, float, pulp.LpVariable]]:
    """Whole instances and powered nodes; returns (region, watts, variable) power terms.

    An instance's GPUs draw its idle power instead of the bare share, hence
    ``idle_w − gpus·bare_w_per_gpu`` per instance beside ``node_gpus·bare_w_per_gpu`` per
    powered node: a node's energy is then its instances' idle power plus its free GPUs'
    bare power, as the simulator accounts it.
    """
    if not problem.instance_units:
        return []
    groups = {(g.region, g.name): g for g in problem.gpu_groups}
    slices: dict[tuple[str, str], list[pulp.LpVariable]] = defaultdict(list)
    for (region, config), var in x.items():
        slices[(region, config.gpu_type)].append(var)
    used: dict[tuple[str, str], list[tuple[pulp.LpVariable, float]]] = defaultdict(list)
    terms: list[tuple[str, float, pulp.LpVariable]] = []
    for index, unit in enumerate(problem.instance_units):
        group = groups[(unit.region, unit.group)]
        most = group.gpus // unit.gpus
        least = min(problem.min_instances.get(unit.gpu_type, 0), most)
        n = pulp.LpVariable(f"n{index}", lowBound=least, upBound=most, cat=pulp.LpInteger)
        held = slices.get((unit.region, unit.gpu_type), [])
        if held:
            lp += pulp.lpSum(held) <= unit.slices * n, f"instances_{index}"
        used[(unit.region, unit.group)].append((n, float(unit.gpus)))
        terms.append((unit.region, unit.idle_w - unit.gpus * group.bare_w_per_gpu, n))
    for index, (key, held_gpus) in enumerate(sorted(used.items(), key=lambda kv: kv[0])):
        group = groups[key]
        lp += pulp.LpAffineExpression(held_gpus) <= group.gpus, f"gpu_group_{index}"
        if group.bare_w_per_gpu > 0:
            nodes = pulp.LpVariable(
                f"nodes{index}",
                lowBound=0,
                upBound=math.ceil(group.gpus / group.node_gpus),
                cat=pulp.LpInteger,
            )
            lp += group.node_gpus * nodes >= pulp.LpAffineExpression(held_gpus)
            terms.append((group.region, group.node_gpus * group.bare_w_per_gpu, nodes))
    return terms


def _add_single_clock(
    lp: pulp.LpProblem, x: dict[XKey, pulp.LpVariable], bounds: dict[XKey, int]
) -> None:
    """DynamoLLM Eq. 1: one clock f_i for all instances of a pool (region, class, GPU, TP)."""
    pools: dict[tuple[object, ...], dict[float | None, list[XKey]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for key in x:
        region, c = key
        pool = (region, c.partition, c.request_class, c.gpu_type, c.tensor_parallel)
        pools[pool][c.clock_mhz].append(key)
    _at_most_one_set(lp, [list(by.values()) for by in pools.values()], x, bounds, "y")


def _add_class_groups(
    lp: pulp.LpProblem,
    problem: PlanningProblem,
    x: dict[XKey, pulp.LpVariable],
    bounds: dict[XKey, int],
) -> None:
    """Exclusive class groups: one binary per (region, GPU type, group), at most one set."""
    if not problem.class_groups:
        return
    pools: dict[tuple[str, str], dict[str, list[XKey]]] = defaultdict(lambda: defaultdict(list))
    for key in x:
        region, config = key
        group = problem.class_groups.get(config.request_class)
        if group is not None:
            pools[(region, config.gpu_type)][group].append(key)
    _at_most_one_set(lp, [list(by.values()) for by in pools.values()], x, bounds, "g")


def _at_most_one_set(
    lp: pulp.LpProblem,
    pools: list[list[list[XKey]]],
    x: dict[XKey, pulp.LpVariable],
    bounds: dict[XKey, int],
    prefix: str,
) -> None:
    """Per pool, let at most one of its key sets be non-zero: a binary per set, ``x ≤ bound·b``.

    Shared by the single-clock rule (sets = clocks) and the class groups (sets = groups).
    """
    counter = 0
    for sets in pools:
        if len(sets) < 2:
            continue
        chosen = []
        for keys in sets:
            b = pulp.LpVariable(f"{prefix}{counter}", cat=pulp.LpBinary)
            counter += 1
            chosen.append(b)
            for key in keys:
                lp += x[key] <= bounds[key] * b
        lp += pulp.lpSum(chosen) <= 1


def _add_region_shares(
    lp: pulp.LpProblem, problem: PlanningProblem, x: dict[XKey, pulp.LpVariable]
) -> None:
    """Capacity of class r in region n ≤ share × capacity of r everywhere (routing limits)."""
    for (cls, region), share in sorted(problem.region_share_limits.items()):
        if share <= 0 or share >= 1:
            continue  # 0 is handled by not creating variables; 1 never binds
        total = [(v, k[1].max_qps) for k, v in x.items() if k[1].request_class == cls]
        local = [
            (v, k[1].max_qps) for k, v in x.items() if k[1].request_class == cls and k[0] == region
        ]
        if local:
            lp += pulp.LpAffineExpression(local) <= share * pulp.LpAffineExpression(total)
