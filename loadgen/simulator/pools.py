"""Pools of identical instances, their measured no-queue profile, and the classifier's plan.

A pool is (region, GPU type, TP) with one queue (scheduler discipline) and one placer
(router policy), the same cores the live scheduler and router run. Its profile TTFT/TBT, the
``Lat`` of FREESH Eq. 6, is measured by running one request alone on a fresh engine of the
pool's configuration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loadgen.simulator.instance import SimInstance
from loadgen.simulator.policies import PolicySet
from loadgen.simulator.scenario import RegionSpec, Scenario
from proto.messages import Plan, PoolPlan, RouteWeight
from services.router.placement import Placer, make_placer
from services.scheduler.queueing import HeapDiscipline, make_discipline
from shared.engine import EngineConfig, EngineRequest, create_engine

__all__ = [
    "PROFILE_REQUEST",
    "Pool",
    "build_pools",
    "measure_profile",
    "routing_plan",
]

PROFILE_REQUEST = (1024, 128)
"""(prompt, output) tokens of the profiling request: near the conversation trace's medians."""


@dataclass(slots=True)
class Pool:
    """Instances that share one configuration, one queue and one placer."""

    pool_id: str
    region: str
    """Region of every instance (the single pool's instances keep their own regions)."""
    gpu: str
    config: EngineConfig
    queue: HeapDiscipline
    placer: Placer
    max_instances: int
    ttft_s: float
    tbt_s: float
    slots: tuple[tuple[str, str], ...] = ()
    """(region, GPU type) of each instance slot, in the order slots are filled."""
    request_class: str | None = None
    """The one class this pool serves (MultiPool); ``None``: every class."""
    class_group: str | None = None
    """The one exclusive class group the epoch planner may give this pool
    (``PolicySet.plan_group_pools``); ``None``: any."""
    instances: list[SimInstance] = field(default_factory=list)

    def live(self) -> list[SimInstance]:
        """Instances that take new requests (ready or starting, not draining)."""
        return [i for i in self.instances if not i.draining]


def measure_profile(config: EngineConfig) -> tuple[float, float]:
    """Return (TTFT, TBT) seconds of one :data:`PROFILE_REQUEST` alone on ``config``."""
    engine = create_engine(config)
    prompt, output = PROFILE_REQUEST
    engine.add(EngineRequest(request_id="profile", prompt_tokens=prompt, output_tokens=output))
    first = last = -1.0
    while (result := engine.step()) is not None:
        if result.emitted:
            end = result.start_s + result.duration_s
            first = end if first < 0 else first
            last = end
    return first, (last - first) / (output - 1)


def _classifier_default() -> tuple[float, float]:
    """(TTFT, TBT) seconds the live classifier assumes for a pool whose plan has no profile."""
    from shared.config import ClassifierSettings

    settings = ClassifierSettings()
    return settings.default_ttft_ms / 1000.0, settings.default_tbt_ms / 1000.0


def _config(scenario: Scenario, gpu: str, tp: int) -> EngineConfig:
    return EngineConfig(
        gpu=gpu,
        model=scenario.model,
        tp=tp,
        max_num_seqs=scenario.engine.max_num_seqs,
        max_num_batched_tokens=scenario.engine.max_num_batched_tokens,
    )


def build_pools(
    scenario: Scenario, policy: PolicySet, class_shares: Mapping[str, float] | None = None
) -> list[Pool]:
    """Create the policy's pools over the scenario's inventory (no instances yet).

    ``class_shares`` (``pooling = "class"`` only) sizes one pool per class.
    """
    pools: list[Pool] = []
    profiles: dict[tuple[str, int], tuple[float, float]] = {}

    def profile(config: EngineConfig) -> tuple[float, float]:
        key = (config.gpu, config.tp)
        if key not in profiles:
            profiles[key] = measure_profile(config)
        return profiles[key]

    def new_pool(
        pool_id: str, region: str, gpu: str, slots: list[tuple[str, str]], tp: int = policy.tp
    ) -> Pool:
        config = _config(scenario, gpu, tp)
        ttft, tbt = profile(config) if policy.profile == "measured" else _classifier_default()
        return Pool(
            pool_id=pool_id,
            region=region,
            gpu=gpu,
            config=config,
            queue=make_discipline(policy.discipline, alpha=scenario.slo.alpha_llf)
            if policy.discipline in ("llf", "edf")
            else make_discipline(policy.discipline),
            placer=make_placer(policy.placer),
            max_instances=len(slots),
            ttft_s=ttft,
            tbt_s=tbt,
            slots=tuple(slots),
        )

    regions = _regions(scenario, policy)
    every = [
        (region.name, gpu)
        for region in regions
        for gpu, n in region.gpus.items()
        if policy.gpu_type in (None, gpu)
        for _ in range(n // policy.tp)
    ]
    if policy.pooling == "class":
        from loadgen.simulator.multipool import class_instance_counts

        counts = (
            dict(policy.class_instances)
            if policy.class_instances is not None
            else class_instance_counts(class_shares or {}, len(every))
        )
        if sum(counts.values()) > len(every):
            raise ValueError(
                f"{sum(counts.values())} class instances exceed the {len(every)} TP{policy.tp} "
                "slots of the inventory"
            )
        start = 0
        for name, count in counts.items():
            if count < 1:
                continue
            chunk = every[start : start + count]
            start += count
            pool = new_pool(f"class-{name}", "*", chunk[0][1], chunk)
            pool.request_class = name
            pools.append(pool)
        return pools
    if policy.pooling == "single":
        # One pool: each instance slot keeps its own region and GPU type; the profile (Lat of
        # Eq. 6) is that of the most numerous GPU type among the slots it uses.
        size = len(every) if policy.instances is None else policy.instances
        if not 1 <= size <= len(every):
            raise ValueError(f"a single pool of {size} instances: the inventory has {len(every)}")
        slots = every[:size]
        gpu_counts: dict[str, int] = {}
        for _, gpu in slots:
            gpu_counts[gpu] = gpu_counts.get(gpu, 0) + 1
        gpu = max(gpu_counts, key=lambda g: gpu_counts[g])
        return [new_pool("single", "*", gpu, slots)]
    # TP modes (the planner's choice) and class groups are pools over the same GPUs, told
    # apart by "-tpN" and "-<group>".
    tps = policy.plan_tps or (policy.tp,)
    groups: tuple[str | None, ...] = (None,)
    if policy.plan_group_pools:
        from services.planner.live_plan import input_groups
        from shared.domain.classes import scheme_by_name

        scheme = scheme_by_name(scenario.slo.scheme)
        groups = tuple(sorted(set(input_groups(scheme.classes, scheme.labels).values())))
    for region in regions:
        for gpu, n in region.gpus.items():
            for tp in tps:
                if n // tp <= 0 or policy.gpu_type not in (None, gpu):
                    continue
                for group in groups:
                    pool_id = f"{region.name}-{gpu}" + (f"-tp{tp}" if policy.plan_tps else "")
                    pool_id += f"-{group}" if group else ""
                    pool_slots = [(region.name, gpu)] * (n // tp)
                    pool = new_pool(pool_id, region.name, gpu, pool_slots, tp)
                    pool.class_group = group
                    pools.append(pool)
    return pools


def _regions(scenario: Scenario, policy: PolicySet) -> list[RegionSpec]:
    """The scenario's regions the policy may use, in the policy's order.

    Raises:
        ValueError: for a region the scenario does not have.
    """
    if not policy.regions:
        return list(scenario.regions)
    by_name = {r.name: r for r in scenario.regions}
    unknown = [name for name in policy.regions if name not in by_name]
    if unknown:
        raise ValueError(f"regions {unknown} are not in scenario {scenario.name!r}")
    return [by_name[name] for name in policy.regions]


def routing_plan(pools: Sequence[Pool], weights: dict[str, float], scheme: str, t_s: float) -> Plan:
    """The plan the classifier follows: every class to every pool with a positive weight, or,
    for class pools (MultiPool), each class to its own pool."""
    return Plan(
        epoch=0,
        issued_at=max(t_s, 0.0),
        valid_until=max(t_s, 0.0),
        scheme=scheme,
        pools=[
            PoolPlan(
                pool_id=p.pool_id,
                region=p.region,
                gpu=p.gpu,
                tp=p.config.tp,
                instances=len(p.live()),
                ttft_ms=p.ttft_s * 1000.0,
                tbt_ms=p.tbt_s * 1000.0,
            )
            for p in pools
        ],
        routes={
            name: [
                RouteWeight(pool_id=p.pool_id, weight=weights.get(p.pool_id, 0.0))
                for p in pools
                if name in ("*", p.request_class) and weights.get(p.pool_id, 0.0) > 0
            ]
            for name in {"*", *(p.request_class for p in pools if p.request_class)}
        },
    )
