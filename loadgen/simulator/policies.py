"""Named policy sets: which core runs each knob (pools, queue, placement, clock, scale, region).

Each set only *names* production cores: the queue discipline comes from
``services.scheduler.queueing``, placement from ``services.router.placement``, the clock from
``services.dvfs`` (MIAD, FREESH Eq. 5a/5b) when that package provides it, the class and
length prediction from ``services.classifier``. What the simulator adds itself, and says so,
is the reactive instance scaler and the carbon-ordered region choice (see
:class:`ScalerSettings`), standing in until the planner is wired in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from loadgen.simulator.policy_names import ABLATION_LEVERS, DEFAULT_SET
from shared.config import Settings
from shared.engine.profiler import ProfileSlo

__all__ = [
    "ABLATIONS",
    "DEFAULT_SET",
    "POLICY_SETS",
    "SIMULATOR_SIDE",
    "PolicySet",
    "ScalerSettings",
    "instances_needed",
    "miad_available",
    "policy_by_name",
    "policy_from_settings",
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

    def __post_init__(self) -> None:
        shared = bool(self.plan_tps) or self.plan_group_pools
        if shared and not (self.scaling == "planned" and self.plan_whole_instances):
            raise ValueError(
                f"{self.name}: plan_tps and plan_group_pools put pools over the same GPUs, "
                "which only the epoch planner with plan_whole_instances keeps within them"
            )
        if self.plan_group_pools and not self.plan_split_long_input:
            raise ValueError(f"{self.name}: plan_group_pools needs plan_split_long_input")


POLICY_SETS: Final[dict[str, PolicySet]] = {
    p.name: p
    for p in (
        PolicySet(
            name="single-pool",
            description="SinglePool: one TP8 pool, max clock, FCFS, RR, statically sized (every "
            "GPU unless a size is given)",
            pooling="single",
            tp=8,
        ),
        PolicySet(
            name="multi-pool",
            description="DynamoLLM MultiPool: one static TP8 pool per class (sized per class, or "
            "every GPU split by token share), max clock, FCFS, RR",
            pooling="class",
            tp=8,
        ),
        PolicySet(
            name="scale-shard",
            description="DynamoLLM ScaleShard: MultiPool's class pools of 8-GPU nodes, each node "
            "re-sharded between TP8, 2xTP4 and 4xTP2 every scale period (lowest profiled power "
            "covering the load, overhead gate, re-shard delay), max clock, FCFS, least-loaded",
            pooling="class",
            tp=8,
            placer="least-loaded",
            scaling="shard",
        ),
        PolicySet(
            name="max-clock-fcfs-rr",
            description="per-region TP4 pools, max clock, every GPU on, FCFS, round robin",
        ),
        PolicySet(
            name="scale-freq",
            description="DynamoLLM ScaleFreq: static TP4 pools, FCFS, least-loaded, MIAD clock",
            placer="least-loaded",
            clock="miad",
        ),
        PolicySet(
            name="scale-freq-profile",
            description="DynamoLLM ScaleFreq with its own instance manager: static TP4 pools, "
            "FCFS, least-loaded, every 5 s the least-power clock whose profiled P99 TTFT and TBT "
            "meet the SLO at the instance's load, maximum clock after a request near its bound",
            placer="least-loaded",
            clock="profile",
        ),
        PolicySet(
            name="scale-inst",
            description="reactive instance scaling, carbon-first regions, max clock, FCFS",
            placer="least-loaded",
            scaling="reactive",
            region_choice="carbon",
        ),
        PolicySet(
            name="live-static",
            description="the live stack on its static settings (planner.mode static, "
            "dvfs.mode fixed, router.placer bfio): per-region pools, LLF, BF-IO, quantile "
            "predictor, fixed max clock, every worker on, classifier-default profile",
            tp=1,
            discipline="llf",
            placer="bfio",
            predictor="quantile",
            profile="classifier-default",
            router_view="stats",
        ),
        PolicySet(
            name="greenserve",
            description="LLF, least-loaded, MIAD at half the SLO above the SLO clock floor, "
            "reactive scaling, carbon-first regions",
            discipline="llf",
            placer="least-loaded",
            clock="miad",
            miad_guard=0.5,
            miad_slo_floor=True,
            scaling="reactive",
            region_choice="carbon",
        ),
        PolicySet(
            name="greenserve-planned",
            description="the epoch planner (MILP, carbon objective, forecast demand and "
            "intensity) sets instances, routes and clock caps; MIAD (guard 0.5, SLO floor) "
            "under the cap; LLF, least-loaded",
            discipline="llf",
            placer="least-loaded",
            clock="miad",
            miad_guard=0.5,
            miad_slo_floor=True,
            scaling="planned",
            objective="carbon",
            # As measured (docs/simulator.md): K = 4 slices and a 1 % gap, the live planner's
            # values then; the live defaults are now the headline's (16, 1e-4).
            plan_slices=4,
            plan_mip_rel_gap=0.01,
        ),
        PolicySet(
            name="min-energy",
            description="FREESH MinEnergy: the epoch planner with the energy objective; "
            "otherwise as greenserve-planned",
            discipline="llf",
            placer="least-loaded",
            clock="miad",
            miad_guard=0.5,
            miad_slo_floor=True,
            scaling="planned",
            objective="energy",
            # As measured (docs/simulator.md): K = 4 slices and a 1 % gap, the live planner's
            # values then; the live defaults are now the headline's (16, 1e-4).
            plan_slices=4,
            plan_mip_rel_gap=0.01,
        ),
    )
}
"""Every policy set the simulator knows, by name."""


def _variant(base: PolicySet, suffix: str, description: str, **changes: object) -> PolicySet:
    """``base`` with some knobs changed, named ``<base>-<suffix>``."""
    return replace(
        base,
        name=f"{base.name}-{suffix}",
        description=description,
        **changes,  # type: ignore[arg-type]
    )


def _greenserve_variants() -> tuple[PolicySet, ...]:
    """The GreenServe set with one knob changed: where its SLO/energy trade-off comes from."""
    base = POLICY_SETS["greenserve"]
    return (
        _variant(
            base,
            "guard80",
            "GreenServe with MIAD thresholds at 80 % of the SLO (with floor)",
            miad_guard=0.8,
        ),
        _variant(
            base,
            "miad-edge",
            "GreenServe with MIAD on the SLO itself and FREESH's 300 MHz floor",
            miad_guard=1.0,
            miad_slo_floor=False,
        ),
        _variant(
            base,
            "bfio",
            "GreenServe with BF-IO placement (seed 003)",
            placer="bfio",
        ),
    )


PROFILE_PERCENTILE: Final = ProfileSlo().percentile
"""Share of requests the one-class profile rows hold within SLO (``ProfileSlo.percentile``);
the mixed-class measurement uses the same share so that its ratio isolates the mixing."""


def _planned_variants() -> tuple[PolicySet, ...]:
    """Planner-side fixes of the planned sets' TTFT misses, alone and stacked."""
    replan = "re-plans when observed demand exceeds the planned capacity"
    trend = "demand forecast with the recent trend"
    margin = "profile rows need TTFT <= MIAD guard x SLO"
    mixed = "capacities from the trace's class mix (share in SLO = the profiler's p90)"
    feedback = "re-plans on SLO misses with a learned capacity de-rating"
    split = "pools serve long-input or other classes, not both"
    alpha = "alpha from the forecast's past errors"
    out: list[PolicySet] = []
    for base in (POLICY_SETS["greenserve-planned"], POLICY_SETS["min-energy"]):
        guard = base.miad_guard
        desc = base.description
        out += [
            _variant(base, "replan", f"{desc}; {replan}", replan="event"),
            _variant(base, "trend", f"{desc}; {trend}", demand_forecast="trend"),
            _variant(base, "margin", f"{desc}; {margin}", plan_ttft_margin=guard),
            _variant(
                base,
                "replan-trend",
                f"{desc}; {replan}; {trend}",
                replan="event",
                demand_forecast="trend",
            ),
            _variant(
                base,
                "all",
                f"{desc}; {replan}; {trend}; {margin}",
                replan="event",
                demand_forecast="trend",
                plan_ttft_margin=guard,
            ),
            _variant(base, "mixed", f"{desc}; {mixed}", plan_mix_goal=PROFILE_PERCENTILE),
            _variant(base, "feedback", f"{desc}; {feedback}", slo_feedback=True),
            _variant(
                base,
                "mixed-feedback",
                f"{desc}; {mixed}; {feedback}",
                plan_mix_goal=PROFILE_PERCENTILE,
                slo_feedback=True,
            ),
            _variant(
                base,
                "mixed-feedback-margin",
                f"{desc}; {mixed}; {feedback}; {margin}",
                plan_mix_goal=PROFILE_PERCENTILE,
                slo_feedback=True,
                plan_ttft_margin=guard,
            ),
            _variant(
                base,
                "split",
                f"{desc}; {mixed}; {split}",
                plan_mix_goal=PROFILE_PERCENTILE,
                plan_split_long_input=True,
            ),
            _variant(
                base,
                "split-feedback",
                f"{desc}; {mixed}; {split}; {feedback}",
                plan_mix_goal=PROFILE_PERCENTILE,
                plan_split_long_input=True,
                slo_feedback=True,
            ),
            _variant(
                base,
                "split-alpha",
                f"{desc}; {mixed}; {split}; {alpha}",
                plan_mix_goal=PROFILE_PERCENTILE,
                plan_split_long_input=True,
                plan_alpha="forecast-error",
            ),
        ]
    return tuple(out)


POLICY_SETS.update({p.name: p for p in _greenserve_variants()})
POLICY_SETS.update({p.name: p for p in _planned_variants()})

MODES_PRIMARY_SLACK: Final = 0.05
"""Energy the ``min-energy-modes`` planner may spend for less carbon (5 % of the least):
chosen on minutes 10-30 of conv (``--window 600:1800``) among 0, 0.05 and 0.3
(docs/simulator.md, "Planner modes")."""


def _modes_set() -> PolicySet:
    """The planner over whole instances choosing TP modes and class-group pools."""
    base = POLICY_SETS["min-energy-split-feedback"]
    return replace(
        base,
        name="min-energy-modes",
        description="the epoch planner over whole instances (idle power, powered nodes) "
        "choosing per region's GPUs the TP mode (4 or 8) and class-group pools, sized for "
        "coincident demand; least carbon within 5 % of least energy; mixed-class "
        "capacities, SLO-miss feedback, MIAD under the plan's clock cap, LLF, least-loaded",
        plan_demand="coincident",
        plan_whole_instances=True,
        plan_tps=(4, 8),
        plan_group_pools=True,
        plan_slices=16,
        plan_primary_slack=MODES_PRIMARY_SLACK,
        plan_mip_rel_gap=1e-4,
    )


POLICY_SETS[_modes_set().name] = _modes_set()


def miad_available() -> bool:
    """Whether ``services.dvfs`` provides the MIAD controller (another engineer's core)."""
    try:
        from services.dvfs import miad  # noqa: F401
    except ImportError:
        return False
    return True


def policy_by_name(name: str, **overrides: object) -> PolicySet:
    """Return a named policy set, optionally with some fields replaced.

    Raises:
        KeyError: for an unknown name.
    """
    if name not in POLICY_SETS:
        raise KeyError(f"unknown policy set {name!r}; choose one of {', '.join(POLICY_SETS)}")
    policy = POLICY_SETS[name]
    return replace(policy, **overrides) if overrides else policy  # type: ignore[arg-type]


def instances_needed(
    load: float, max_num_seqs: int, settings: ScalerSettings, share: float | None = None
) -> int:
    """Instances the reactive scaler wants for ``load`` requests held at the peak."""
    share = settings.target_share if share is None else share
    per_instance = max(share * max_num_seqs, 1.0)
    return max(settings.min_instances, math.ceil(settings.headroom * load / per_instance))


FLEET_TP_MODES: Final = (4, 8)
"""TP modes the simulated fleet's GPUs can be run in (the live fleet's are the TPs its
workers register with): part of the deployment, not a planner setting."""


def policy_from_settings(settings: Settings, *, name: str = DEFAULT_SET) -> PolicySet:
    """The policy the live stack runs with ``settings`` (``planner.mode = milp``), as a
    simulator policy set: every planner, scheduler and classifier setting it reads is the
    live one. What the simulator adds is said in :data:`SIMULATOR_SIDE`."""
    planner = settings.planner
    split = planner.class_groups == "input-split"
    return PolicySet(
        name=name,
        description="the live planner's settings: the epoch planner (MILP, "
        f"{planner.objective} objective, least carbon within {planner.primary_slack:.0%}) over "
        "whole instances choosing TP modes and class-group pools for coincident demand; "
        "profiles re-measured on the served sizes; SLO feedback (capacity cut <= "
        f"{1 - (planner.feedback_step or 0):.0%} per miss window, floor "
        f"{planner.feedback_floor:.0%}, maximum clock for a step after a miss); MIAD under the "
        f"plan's clock cap; {settings.scheduler.discipline.upper()}, {settings.router.placer}; "
        f"{settings.classifier.predictor} length predictor",
        pooling="region",
        discipline=settings.scheduler.discipline,
        placer=settings.router.placer,
        predictor=settings.classifier.predictor,
        clock=_clock_mode(settings),
        miad_guard=settings.dvfs.miad_guard,
        miad_slo_floor=settings.dvfs.miad_slo_floor,
        scaling="planned",
        objective="energy" if planner.objective == "energy" else "carbon",
        plan_mix_goal=PROFILE_PERCENTILE if planner.mixed_capacity else None,
        plan_split_long_input=split,
        plan_group_pools=split,
        slo_feedback=planner.slo_feedback,
        feedback_step=planner.feedback_step,
        feedback_floor=planner.feedback_floor,
        feedback_boost=planner.feedback_boost,
        feedback_replan=planner.feedback_replan,
        plan_observed_sizes=planner.observed_profiles,
        plan_demand="coincident" if planner.coincident_demand else "class-peaks",
        plan_tps=FLEET_TP_MODES if planner.whole_instances else (),
        plan_whole_instances=planner.whole_instances,
        plan_primary_slack=planner.primary_slack,
        plan_slices=planner.time_share_slices,
        plan_mip_rel_gap=planner.mip_rel_gap,
    )


_CLOCK_MODES: Final[dict[str, ClockMode]] = {"miad": "miad", "profile": "profile", "fixed": "max"}
"""The simulator's clock control for each live ``dvfs.mode`` run without ``dvfs.clock_mhz``."""


def _clock_mode(settings: Settings) -> ClockMode:
    """The simulator's clock control for the live agent's ``dvfs.mode``; a clock the
    simulator cannot mirror (a fixed clock or MIAD ceiling below the maximum) is refused."""
    mode, fixed = settings.dvfs.mode, settings.dvfs.clock_mhz
    if mode in _CLOCK_MODES and fixed is None:
        return _CLOCK_MODES[mode]
    raise ValueError(
        f"dvfs.mode {mode!r}{'' if fixed is None else f' at {fixed:g} MHz'} has no simulator "
        "counterpart in the headline (miad, profile or fixed, at the GPU's maximum clock)"
    )


SIMULATOR_SIDE: Final = (
    "clock: after an SLO miss the pool runs at its maximum clock for a planning step (live: "
    "the plan lifts the pool's clock cap and MIAD climbs on its own); the served floor of "
    "pools sent long prompts uses the p99 of every served request (live: the node's); TP "
    "modes 4 and 8 over the scenario's GPUs (live: the TPs the workers register with)"
)
"""Where the headline still differs from what ``greenserve up`` runs with its defaults."""


def _default_set() -> PolicySet:
    """The product's default: the live defaults (:func:`policy_from_settings`)."""
    return policy_from_settings(Settings())


def _ablations(base: PolicySet) -> tuple[PolicySet, ...]:
    """The default with one lever switched off each (issue 28: one ablation per lever)."""
    return (
        _variant(
            base,
            "no-scale-down",
            "the default without scale-down: every instance always on in static TP4 pools "
            "per region (no planner), MIAD clocks, LLF, least-loaded",
            scaling="static",
            pooling="region",
            plan_tps=(),
            plan_group_pools=False,
            plan_split_long_input=False,
            plan_whole_instances=False,
        ),
        _variant(
            base, "max-clock", "the default at the maximum clock (no MIAD, no caps)", clock="max"
        ),
        _variant(
            base, "tp8-only", "the default with one TP mode (TP8, DynamoLLM's)", tp=8, plan_tps=()
        ),
        _variant(
            base,
            "no-shift",
            "the default without the carbon tie-break (least "
            "energy only: no region or time shift for carbon)",
            plan_primary_slack=0.0,
        ),
        _variant(base, "fcfs", "the default with FCFS queues instead of LLF", discipline="fcfs"),
        _variant(
            base, "bfio", "the default with BF-IO placement instead of least-loaded", placer="bfio"
        ),
        _variant(
            base,
            "no-guards",
            "the default without the robustness guard rails "
            "(reference-trace profiles, unbounded feedback, no clock boost)",
            plan_observed_sizes=False,
            feedback_step=None,
            feedback_floor=0.0,
            feedback_boost=False,
            feedback_replan=True,
        ),
        _variant(
            base,
            "oracle-lengths",
            "the default with true output lengths (an "
            "ablation: no deployable predictor knows them)",
            predictor="oracle",
        ),
    )


POLICY_SETS[DEFAULT_SET] = _default_set()
ABLATIONS: Final = tuple(f"{DEFAULT_SET}-{lever}" for lever in ABLATION_LEVERS)
"""The default's one-lever ablations, in the order ``bench cluster`` reports them."""
POLICY_SETS.update({p.name: p for p in _ablations(POLICY_SETS[DEFAULT_SET])})
