"""The product's default set: the live stack's settings read as a simulator policy set, and
the default's one-lever ablations.

:func:`policy_from_settings` reads every planner, scheduler, router, classifier and DVFS
setting the simulator mirrors; :data:`SIMULATOR_SIDE` says where the headline still differs.
"""

from __future__ import annotations

from typing import Final

from loadgen.simulator.policy_names import DEFAULT_SET
from loadgen.simulator.policy_set import PROFILE_PERCENTILE, ClockMode, PolicySet, _variant
from shared.config import Settings

__all__ = ["FLEET_TP_MODES", "SIMULATOR_SIDE", "policy_from_settings"]

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
        f"{planner.feedback_floor:.0%}, maximum clock for a step after a miss, up to "
        f"{planner.feedback_grow} added instance(s) per pool that outgrew its plan); MIAD "
        f"under the plan's clock cap; {settings.scheduler.discipline.upper()}, "
        f"{settings.router.placer}; "
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
        feedback_grow=planner.feedback_grow,
        plan_observed_sizes=planner.observed_profiles,
        plan_demand="coincident" if planner.coincident_demand else "class-peaks",
        plan_tps=FLEET_TP_MODES if planner.whole_instances else (),
        plan_whole_instances=planner.whole_instances,
        plan_primary_slack=planner.primary_slack,
        plan_slices=planner.time_share_slices,
        plan_mip_rel_gap=planner.mip_rel_gap,
        worker_admission=settings.worker.admission,
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
    "modes 4 and 8 over the scenario's GPUs (live: the TPs the workers register with); "
    "request path: the scheduler's emergency ladder (scheduler.ladder, on live) is not "
    "simulated; it acts on requests queued at the scheduler, which wait there only while "
    "every worker of their pool is full (the worker's admission gate, which would queue "
    "more, is off by default live and in the headline alike)"
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
            "(reference-trace profiles, unbounded feedback, no clock boost, no added instances)",
            plan_observed_sizes=False,
            feedback_step=None,
            feedback_floor=0.0,
            feedback_boost=False,
            feedback_replan=True,
            feedback_grow=0,
        ),
        _variant(
            base,
            "oracle-lengths",
            "the default with true output lengths (an "
            "ablation: no deployable predictor knows them)",
            predictor="oracle",
        ),
    )
