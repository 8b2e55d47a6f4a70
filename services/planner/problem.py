"""Planner inputs: serving configurations, one epoch's problem, SLO and solver settings.

The planner solves FREESH Eq. 1 (seed 000 §1.4) generalised with DynamoLLM's clock dimension
(seed 001 Eq. 1): a *configuration* is one profile row, i.e. (partition, request class, GPU
type, TP degree, clock level), and the decision is how many instances of each configuration to
run in each region for the coming epoch. Everything here is a plain frozen dataclass so the live
service and the offline simulator build problems the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFAULT_TTFT_MS_BY_CLASS",
    "GpuGroup",
    "InstanceUnit",
    "IntensityUnit",
    "Objective",
    "PartitionScheme",
    "PlannerSettings",
    "PlanningProblem",
    "ServingConfig",
    "SloPolicy",
    "Solver",
    "TieBreak",
]

DEFAULT_TTFT_MS_BY_CLASS: Final[Mapping[str, float]] = {
    "SS": 300.0,
    "SL": 300.0,
    "LS": 600.0,
    "LL": 600.0,
}
"""FREESH's TTFT limits per request type (seed 000 §1.4: 300 ms short input, 600 ms long)."""


class Objective(enum.StrEnum):
    """What the MILP minimises (FREESH Eq. 1a, or the MinEnergy baseline with λ = 1)."""

    CARBON = "carbon"
    ENERGY = "energy"


class TieBreak(enum.StrEnum):
    """Secondary, lexicographic objective among primary-optimal plans.

    FREESH §7.2 A: MinEnergy's emissions depend on which energy-optimal plan the solver
    returns (the same configuration in two regions costs the same energy). A second solve that
    fixes the primary at its optimum and optimises a secondary makes the choice explicit.
    """

    AUTO = "auto"
    """Least carbon for the energy objective; none for carbon (its ties are rare), or least
    energy when negative λ is clamped (workers at λ = 0 are free)."""
    NONE = "none"
    """Whatever plan the solver returns first (solver-dependent)."""
    MIN_CARBON = "min_carbon"
    MAX_CARBON = "max_carbon"
    """Worst-case emissions among primary-optimal plans: the other end of the tie range."""
    MIN_ENERGY = "min_energy"


class Solver(enum.StrEnum):
    """MILP backend reached through pulp."""

    HIGHS = "highs"
    """In-process HiGHS through highspy (pulp's ``HiGHS``); no subprocess per solve."""
    CBC = "cbc"
    """CBC through pulp's bundled binary (``PULP_CBC_CMD``); one subprocess per solve."""


class IntensityUnit(enum.Enum):
    """Unit of a carbon-intensity series and its conversion to kg CO2 per MWh."""

    LB_PER_MWH = 0.4536
    """PJM marginal emission rates (FREESH data): 1 lb = 0.4536 kg."""
    G_PER_KWH = 1.0
    """Grid average intensity (forecaster output): 1 g/kWh = 1 kg/MWh."""

    @property
    def kg_per_mwh(self) -> float:
        """Kilograms of CO2 per MWh represented by one unit of this intensity."""
        return float(self.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingConfig:
    """One profiled way to serve one request class: a row of ``profiles.csv``.

    Values are measured at a sustained load of ``max_qps`` (FREESH §3: P̃, L̄, D, TBT, TTFT).
    """

    partition: str
    """Partition scheme the request class belongs to (``"a"``, ``"b"``, ``"dynamollm9"``)."""
    request_class: str
    """Request class within the partition (``"SS"`` … ``"LL"``)."""
    mode: str
    """Mode label from the profile (``"m1"``) or generated (``"H100-tp4"``)."""
    gpu_type: str
    gpus: int
    """GPUs one instance occupies (G_{m,c})."""
    tensor_parallel: int
    clock_mhz: float | None
    """SM clock the row was profiled at; ``None`` means the GPU's maximum (FREESH rows)."""
    power_w: float
    """Power of one instance at ``max_qps`` (P̃), watts."""
    max_qps: float
    """Highest arrival rate one instance sustains within its SLO (L̄); 0 means unusable."""
    e2e_s: float
    tbt_ms: float
    ttft_ms: float

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.tensor_parallel < 1:
            raise ValueError(f"gpus and tensor_parallel must be >= 1 in {self}")
        if self.power_w < 0 or self.max_qps < 0:
            raise ValueError(f"power_w and max_qps must be >= 0 in {self}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionScheme:
    """Token thresholds of a request partition (FREESH Table 4, DynamoLLM Table IV).

    Edges are exclusive upper bounds of every bucket but the last, matching the classifier.
    """

    name: str
    input_edges: tuple[int, ...]
    output_edges: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SloPolicy:
    """SLO filters of FREESH Eq. 1e (seed 000 §1.4, repo values by default)."""

    e2e_mean_scale: float | None = 5.0
    """E2E limit D̄ = scale × mean E2E over the configurations of the same (partition, class);
    ``None`` disables the relative limit."""
    e2e_s_by_class: Mapping[str, float] = field(default_factory=dict)
    """Absolute E2E limits per class; applied in addition to the relative one."""
    tbt_ms: float | None = 150.0
    """TBT limit for every class; ``None`` disables it."""
    ttft_ms_by_class: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_TTFT_MS_BY_CLASS)
    )
    """TTFT limit per class; classes not listed use ``default_ttft_ms``."""
    default_ttft_ms: float | None = None
    """TTFT limit for unlisted classes; ``None`` means no limit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuGroup:
    """Physical GPUs of one type in one region, shared by the instance units drawn on it.

    Only whole nodes power off, so every GPU of a powered node without an instance draws
    ``bare_w_per_gpu`` (the simulator's node accounting; 0 leaves nodes out of the model).
    """

    region: str
    name: str
    gpus: int
    node_gpus: int = 8
    bare_w_per_gpu: float = 0.0

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.node_gpus < 1 or self.bare_w_per_gpu < 0:
            raise ValueError(f"need gpus >= 0, node_gpus >= 1, bare_w_per_gpu >= 0 in {self}")


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceUnit:
    """Whole instances of the configurations labelled ``gpu_type`` in ``region``.

    Configurations in slices (time shares of one instance, the live problem's rows) come in
    whole instances: ``n`` instances hold at most ``n × slices`` slices and ``n × gpus`` GPUs
    of ``group``, and each draws ``idle_w`` whether its slices are planned or not (the rows'
    power is then what load adds above idle). Without units a pool's last, partly planned
    instance costs only its planned share, which lets a plan spread load over many pools.
    """

    region: str
    gpu_type: str
    slices: int
    gpus: int
    idle_w: float
    group: str

    def __post_init__(self) -> None:
        if self.slices < 1 or self.gpus < 1 or self.idle_w < 0:
            raise ValueError(f"need slices >= 1, gpus >= 1, idle_w >= 0 in {self}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanningProblem:
    """One epoch of FREESH Eq. 1: regions, configurations, inventory, forecasts.

    ``demand_qps`` and ``intensity`` are per step (Δt = ``step_s``); the epoch is
    ``len(steps) × step_s`` seconds. Worker counts are constant over the epoch.
    """

    regions: tuple[str, ...]
    configs: tuple[ServingConfig, ...]
    inventory: Mapping[tuple[str, str], int]
    """GPUs available per (region, GPU type) (Ḡ_{n,c}); a missing key means none."""
    demand_qps: Mapping[tuple[str, str], tuple[float, ...]]
    """Forecast peak QPS per (partition, class) and step (L̂_{s,r,t}), already scaled by β."""
    intensity: Mapping[str, tuple[float, ...]]
    """Carbon intensity per region and step (λ_n(t)); may be negative (marginal rates)."""
    partitions: Mapping[str, PartitionScheme] = field(default_factory=dict)
    """Thresholds per partition name, copied into the plan; optional."""
    intensity_unit: IntensityUnit = IntensityUnit.G_PER_KWH
    step_s: float = 300.0
    alpha: float = 1.1
    """Safety margin on forecast demand (FREESH repo: 1.1)."""
    slo: SloPolicy = field(default_factory=SloPolicy)
    """SLO filters (Eq. 1e) applied to ``configs`` before the MILP."""
    region_share_limits: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Optional routing limits: the most of a class's capacity (so of its routed demand) that
    one region may hold, keyed by (class, region); 0 forbids the region for that class."""
    class_groups: Mapping[str, str] = field(default_factory=dict)
    """Optional exclusive class groups (class → group): the instances of one (region, GPU
    type) — in a live problem, one pool — serve classes of one group only. Classes not
    listed are unconstrained. DynamoLLM's pools per request type: long prefills in the same
    iterations as short requests break the short ones' TTFT tail."""
    instance_units: tuple[InstanceUnit, ...] = ()
    """Optional whole-instance accounting (:class:`InstanceUnit`): integer instances per
    (region, configuration label), their idle power, and GPUs shared between labels (TP
    modes over the same GPUs); empty: Eq. 1 as FREESH states it."""
    gpu_groups: tuple[GpuGroup, ...] = ()
    """The physical GPU groups the instance units draw on (one per unit ``group``)."""
    min_instances: Mapping[str, int] = field(default_factory=dict)
    """Least whole instances per instance unit label (``gpu_type``; a live pool) that the
    solution holds GPUs and idle power for: a re-plan that may only add to the instances
    running (:func:`services.planner.plan_coverage.adding_only`). One left without load is
    not planned (the new instances start on free GPUs; it drains once they are ready)."""

    def __post_init__(self) -> None:
        steps = {len(v) for v in self.demand_qps.values()} | {
            len(v) for v in self.intensity.values()
        }
        if len(steps) != 1:
            raise ValueError(f"demand and intensity must share one step count, got {steps}")
        missing = set(self.regions) - set(self.intensity)
        if missing:
            raise ValueError(f"no intensity for regions {sorted(missing)}")
        if self.step_s <= 0 or self.alpha <= 0:
            raise ValueError("step_s and alpha must be positive")
        groups = {(g.region, g.name) for g in self.gpu_groups}
        orphans = [u for u in self.instance_units if (u.region, u.group) not in groups]
        if orphans:
            raise ValueError(f"instance units without a GPU group: {orphans}")

    @property
    def steps(self) -> int:
        """Number of steps in the epoch (FREESH: 6 of 5 min)."""
        return len(next(iter(self.intensity.values())))

    @property
    def epoch_s(self) -> float:
        """Length of the epoch in seconds."""
        return self.steps * self.step_s

    def partition_names(self) -> tuple[str, ...]:
        """Partitions present in the configurations, in first-seen order."""
        return tuple(dict.fromkeys(c.partition for c in self.configs))


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannerSettings:
    """How to solve: objective, tie-break, backend and limits."""

    objective: Objective = Objective.CARBON
    tie_break: TieBreak = TieBreak.AUTO
    solver: Solver = Solver.HIGHS
    time_limit_s: float = 10.0
    """Wall limit per solver call; the best plan found so far is used when it is reached."""
    mip_rel_gap: float = 1e-2
    """Stop when the plan is proven within this share of the optimum. 1 % of an epoch's cost is
    far below forecast error and keeps DynamoLLM-scale solves under ~1 s (see
    ``greenserve bench planner-scale``); use 1e-6 for exact parity runs."""
    negative_intensity_fill: bool = True
    """FREESH parity: with λ < 0 the carbon objective rewards idle workers, so the solver fills
    that region's GPUs (Table 3). ``False`` clamps λ at 0 for the objective (never rewards
    burning energy); reported emissions always use the true λ."""
    single_clock_per_pool: bool = False
    """DynamoLLM Eq. 1: all instances of one (region, class, GPU type, TP) share one clock.
    Adds one binary per (pool, clock)."""
    fallback: bool = True
    """When Eq. 1 is infeasible, return the plan that covers the most demand (flagged)."""
    primary_slack: float = 0.0
    """Share of the primary objective's optimum the tie-break stage may spend (0: ties
    only). With the energy objective and 0.1 the plan is the least-carbon one among plans
    within 10 % of the least energy: a bounded trade of energy for carbon."""

    def __post_init__(self) -> None:
        if self.time_limit_s <= 0:
            raise ValueError("time_limit_s must be positive")
        if self.primary_slack < 0:
            raise ValueError("primary_slack must be >= 0")
