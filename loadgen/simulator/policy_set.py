"""The policy-set knobs: one :class:`PolicySet` names a core per knob, and
:class:`ScalerSettings` configures the simulator's own reactive scaler.

:func:`_variant` derives a set from another with some knobs changed; the named sets are in
:mod:`loadgen.simulator.policy_catalog` and :mod:`loadgen.simulator.live_policy`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from shared.engine.profiler import ProfileSlo

__all__ = [
    "PROFILE_PERCENTILE",
    "ClockMode",
    "DemandForecast",
    "ObjectiveName",
    "PlanAlpha",
    "PlanDemand",
    "PolicySet",
    "Pooling",
    "Profile",
    "RegionChoice",
    "Replan",
    "RouterView",
    "ScalerSettings",
    "Scaling",
    "instances_needed",
]

Pooling = Literal["single", "region", "class"]
ClockMode = Literal["max", "miad", "profile"]
Scaling = Literal["static", "reactive", "planned", "shard"]
ObjectiveName = Literal["carbon", "energy"]
RegionChoice = Literal["all", "carbon"]
Profile = Literal["measured", "classifier-default"]
RouterView = Literal["fresh", "stats"]
Replan = Literal["epoch", "event"]
DemandForecast = Literal["live", "trend"]
PlanDemand = Literal["class-peaks", "coincident"]
PlanAlpha = Literal["live", "forecast-error"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalerSettings:
    """The reactive scaler (DynamoLLM §3 instance loop in its simplest, measured-load form).

    Load is the number of requests held by the cluster (queued or on an instance). Scale out
    at any sample when load exceeds ``scale_out_share`` of the active slots; every scale
    period, resize to ``headroom × peak load ÷ (share × max_num_seqs)`` instances. The packing
    ``share`` adapts to SLO feedback, multiplicative-decrease / additive-increase: a sample
    window whose finished requests miss their SLO more often than ``1 − slo_goal`` cuts it by
    ``share_decrease``; a scale period without such a cut raises it by ``share_increase``,
    never above ``target_share``.
    """

    target_share: float = 0.5
    """Share of an instance's ``max_num_seqs`` slots the scaler aims to fill."""
    headroom: float = 1.25
    """Multiplier on the period's peak load (DynamoLLM over-provisions for forecast error)."""
    scale_out_share: float = 0.8
    """Immediate scale-out when load exceeds this share of the active slots."""
    min_instances: int = 1
    slo_goal: float = 0.99
    """Attainment the scaler defends (the issue's 99 %)."""
    share_decrease: float = 0.8
    share_increase: float = 0.05
    min_share: float = 0.05
    min_window_requests: int = 20
    """Finished requests a window needs before its miss rate is trusted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicySet:
    """One named combination of policies, one per knob."""

    name: str
    description: str
    pooling: Pooling = "region"
    """``single``: one pool over every GPU; ``region``: one pool per (region, GPU type);
    ``class``: one pool per request class over slots of every region (DynamoLLM MultiPool)."""
    tp: int = 4
    instances: int | None = None
    """Static size (``single`` pooling): the first ``instances`` slots of the inventory,
    region by region in scenario order; ``None``: every slot (the whole inventory). The
    bench finds the smallest size that meets the SLO (:mod:`loadgen.simulator.sizing`)."""
    class_instances: Mapping[str, int] | None = None
    """Static size per class (``class`` pooling); ``None``: every slot of the inventory,
    split by each class's share of the trace's output tokens."""
    gpu_type: str | None = None
    """The one GPU type the pools may use (``None``: every type). The sized baselines are
    homogeneous (DynamoLLM's DGX H100 nodes): adding slower GPUs to a round-robin pool can
    lower its attainment, which would break the size search's monotonicity."""
    regions: tuple[str, ...] = ()
    """Regions whose GPUs the pools may use, in this order (empty: every region, in scenario
    order); the carbon-aware static baseline names the cleanest one."""
    discipline: str = "fcfs"
    placer: str = "rr"
    predictor: str = "oracle"
    predictor_params: Mapping[str, float] = field(default_factory=dict)
    clock: ClockMode = "max"
    scaling: Scaling = "static"
    """``static``: every instance the inventory holds runs all the time (sized for peak);
    ``reactive``: :class:`ScalerSettings`; ``planned``: the epoch planner's MILP
    (:mod:`loadgen.simulator.planned`) sets instances, per-class routes and clock caps;
    ``shard``: DynamoLLM's ScaleShard re-shards each class pool's nodes between TP2/4/8
    (:mod:`loadgen.simulator.scaleshard`)."""
    objective: ObjectiveName = "carbon"
    """What the epoch planner minimises (``planned`` scaling only): FREESH Eq. 1a carbon, or
    energy (FREESH's MinEnergy baseline)."""
    replan: Replan = "epoch"
    """When the epoch planner solves (``planned`` only): ``epoch``, every ``control.epoch_s``
    as the live planner; ``event``, also as soon as the last step's observed peak demand
    exceeds the capacity the plan was sized for (α × its forecast; DynamoLLM's 5-min level
    re-plans on a load change)."""
    demand_forecast: DemandForecast = "live"
    """``live``: the live planner's ``DemandTracker`` forecast (``recent_max``); ``trend``:
    the recent max plus the least-squares slope of the same recent steps, extrapolated per
    step and never below the recent max (:mod:`loadgen.simulator.demand`)."""
    overhead_gate: bool = True
    """``planned`` only: a re-plan is applied only when DynamoLLM's overhead gate accepts it
    (:mod:`loadgen.simulator.gate`, the live planner's rule); ``False`` applies every solve."""
    plan_ttft_margin: float | None = None
    """SLO-margin filter of the planner's profile rows: a row is eligible only if its profiled
    TTFT is at most this share of its class's TTFT SLO (``None``: the SLO itself, as live)."""
    plan_mix_goal: float | None = None
    """Mixed-class profiles (``planned`` only): each mode's per-class rows are scaled, per
    clock, by the capacity one instance measured on the trace's class mix at this share of
    requests within SLO over what the rows' slice model predicts for that mix
    (:mod:`services.planner.mixed_profiles`); ``None``: the one-class rows, as live."""
    plan_alpha: PlanAlpha = "live"
    """α of FREESH Eq. 1b (``planned`` only): ``live``, the live setting (1.1);
    ``forecast-error``, the ``scaler.slo_goal`` quantile of the live forecast's past
    realised/forecast peak ratios in this run (at least 1; the live α until one exists)."""
    plan_split_long_input: bool = False
    """Exclusive class groups (``planned`` only): each pool serves either the longest input
    bucket's classes or the others, never both (DynamoLLM's pools per request type); the
    mixed-class capacities are then measured per group."""
    slo_feedback: bool = False
    """Re-plan on observed SLO misses (``planned`` only): when a pool's misses over the last
    step are significantly above ``1 − scaler.slo_goal`` (one-sided binomial test), re-plan
    with that pool's capacity de-rated by its observed load over its planned capacity
    (DynamoLLM's and FREESH's feedback from served latency)."""
    plan_demand: PlanDemand = "class-peaks"
    """Demand the epoch planner sizes for (``planned`` only): ``class-peaks``, each class's
    own peak bin rate per step, summed over classes by Eq. 1b (FREESH §2.5, as live);
    ``coincident``, each class's share of the step's arrivals times the peak bin rate of
    all arrivals (classes that share a pool do not peak together)."""
    plan_demand_bin_s: float | None = None
    """Counting bin of the planner's peak rates (``planned`` only; ``None``: the live
    ``demand_bin_s``, 5 s). The mixed-class capacities are measured on Poisson arrivals
    over 120-s windows, which already hold second-scale bursts."""
    plan_tps: tuple[int, ...] = ()
    """TP modes the epoch planner chooses among (``planned``, ``region`` pooling only): one
    pool per (region, GPU type, TP) over the same GPUs, so the MILP picks the mode of each
    region's GPUs (DynamoLLM's and FREESH's modes); empty: one pool of ``tp`` per (region,
    GPU type). Needs ``plan_whole_instances`` (the modes' shared GPU count)."""
    plan_group_pools: bool = False
    """``planned`` with ``plan_split_long_input`` only: one pool per (region, GPU type, TP,
    class group) over the same GPUs, each planned for its own group's classes (DynamoLLM's
    pools per request type), so both groups can share one region's node instead of needing
    a pool, and so a region, each. Needs ``plan_whole_instances``."""
    plan_primary_slack: float = 0.0
    """``planned`` only: share of the objective's optimum the planner's tie-break may spend
    (``PlannerSettings.primary_slack``): with the energy objective, the least-carbon plan
    among those within this share of the least energy."""
    plan_slices: int | None = None
    """``planned`` only: slices per instance (K of the live problem; ``None``: the live
    ``time_share_slices``, 4). Each class with demand takes whole slices, so with K = 4 a
    pool's six short classes need 1.5 instances however light their load; a finer K lets
    whole instances (``plan_whole_instances``) carry the mix they can."""
    plan_mip_rel_gap: float | None = None
    """``planned`` only: the MILP's relative gap (``None``: the live ``mip_rel_gap``, 1 %).
    A slack (``plan_primary_slack``) is counted from the first stage's plan, so a gap
    close to the slack lets near-equal plans decide the region from one solve to the next."""
    feedback_step: float | None = None
    """``slo_feedback`` only: the most one miss window cuts a pool's capacity (a factor);
    ``None``: down to the load it missed at, however low."""
    feedback_floor: float = 0.0
    """``slo_feedback`` only: the least capacity share feedback leaves a pool."""
    feedback_boost: bool = False
    """``slo_feedback`` only: a pool that missed runs at its maximum clock for one step."""
    feedback_replan: bool = True
    """``slo_feedback`` only: a miss also cuts capacity and re-plans (else: boost only)."""
    feedback_grow: int = 0
    """``slo_feedback`` only: the most instances feedback adds to a pool that still misses
    at the maximum clock, before the next plan (``slo_feedback.FeedbackSettings``)."""
    plan_observed_sizes: bool = False
    """``planned`` only: re-profile the modes on the request sizes served so far when they
    drift from the profiled ones (:mod:`shared.domain.observed_mix`; the live
    ``PlannerSettings.observed_profiles``), instead of keeping the reference trace's."""
    plan_whole_instances: bool = False
    """``planned`` only: the MILP counts whole instances at their idle power and powered
    nodes at their free GPUs' bare power (the simulator's accounting), instead of charging a
    pool's last, partly planned instance only its planned share."""
    region_choice: RegionChoice = "all"
    """``carbon``: active instances go to the region with the lowest forecast intensity first."""
    scaler: ScalerSettings = field(default_factory=ScalerSettings)
    profile: Profile = "measured"
    """Where a pool's no-queue TTFT/TBT (``Lat`` of FREESH Eq. 6) comes from: ``measured``
    on the engine, or ``classifier-default``, the classifier settings' defaults that the
    live stack uses while its static plan carries no profile."""
    miad_guard: float = 1.0
    """MIAD congestion thresholds as a share of each class's TTFT/TBT SLO (FREESH Eq. 5a
    fires on the threshold; below 1 it acts before the SLO itself is broken)."""
    miad_slo_floor: bool = False
    """Floor MIAD's clock at :func:`~services.dvfs.slo_miad.slo_clock_floor_mhz` (a lone
    request at each bounded input class's longest prompt meets ``miad_guard`` × its TTFT
    SLO), so an idle instance never sits at a clock a new arrival cannot be served at."""
    miad_queue_triggers: bool = False
    """Also treat a non-empty engine queue as congestion (``MiadConfig.queue_triggers``)."""
    router_view: RouterView = "fresh"
    """KV use the placer sees: ``fresh`` (the engine's now) or ``stats``, the live router's
    view, refreshed by each worker's stats heartbeat every ``control.stats_period_s``."""
    worker_admission: bool = False
    """The live worker's admission gate (``worker.admission``, throttLL'eM Eq. 1–4 through
    :func:`services.worker.admission_gate.judge`): a placement that would break the
    deadline of a request the instance holds is refused, the request goes back to its pool's
    queue and the instance takes nothing more until a request ends there or
    ``worker.admission_hold_s`` passes (0.5 s, model time here). The default set follows the
    live setting (off by default); the scheduler's emergency ladder, which re-steers what
    such refusals leave queued, is not simulated."""
    admission_deadline_lat: float | None = None
    """``worker_admission`` only: deadlines the gate protects, as a multiple of each request's
    Lat; ``None``: α_LLF (``slo.alpha_llf``), the live classifier's ``deadline_s``."""

    def __post_init__(self) -> None:
        shared = bool(self.plan_tps) or self.plan_group_pools
        if shared and not (self.scaling == "planned" and self.plan_whole_instances):
            raise ValueError(
                f"{self.name}: plan_tps and plan_group_pools put pools over the same GPUs, "
                "which only the epoch planner with plan_whole_instances keeps within them"
            )
        if self.plan_group_pools and not self.plan_split_long_input:
            raise ValueError(f"{self.name}: plan_group_pools needs plan_split_long_input")


def _variant(base: PolicySet, suffix: str, description: str, **changes: object) -> PolicySet:
    """``base`` with some knobs changed, named ``<base>-<suffix>``."""
    return replace(
        base,
        name=f"{base.name}-{suffix}",
        description=description,
        **changes,  # type: ignore[arg-type]
    )


PROFILE_PERCENTILE: Final = ProfileSlo().percentile
"""Share of requests the one-class profile rows hold within SLO (``ProfileSlo.percentile``);
the mixed-class measurement uses the same share so that its ratio isolates the mixing."""


def instances_needed(
    load: float, max_num_seqs: int, settings: ScalerSettings, share: float | None = None
) -> int:
    """Instances the reactive scaler wants for ``load`` requests held at the peak."""
    share = settings.target_share if share is None else share
    per_instance = max(share * max_num_seqs, 1.0)
    return max(settings.min_instances, math.ceil(settings.headroom * load / per_instance))
