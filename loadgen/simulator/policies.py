"""Named policy sets: which core runs each knob (pools, queue, placement, clock, scale, region).

Each set only *names* production cores: the queue discipline comes from
``services.scheduler.queueing``, placement from ``services.router.placement``, the clock from
``services.dvfs`` (MIAD, FREESH Eq. 5a/5b) when that package provides it, the class and
length prediction from ``services.classifier``. What the simulator adds itself, and says so,
is the reactive instance scaler and the carbon-ordered region choice (see
:class:`ScalerSettings`), standing in until the planner is wired in.

This module is the sets' one entry point: the knobs are defined in
:mod:`loadgen.simulator.policy_set`, the named sets in :mod:`loadgen.simulator.policy_catalog`,
and the product's default (the live settings) with its ablations in
:mod:`loadgen.simulator.live_policy`.
"""

from __future__ import annotations

from dataclasses import replace

from loadgen.simulator.live_policy import FLEET_TP_MODES, SIMULATOR_SIDE, policy_from_settings
from loadgen.simulator.policy_catalog import ABLATIONS, MODES_PRIMARY_SLACK, POLICY_SETS
from loadgen.simulator.policy_names import DEFAULT_SET
from loadgen.simulator.policy_set import (
    PROFILE_PERCENTILE,
    ClockMode,
    DemandForecast,
    ObjectiveName,
    PlanAlpha,
    PlanDemand,
    PolicySet,
    Pooling,
    Profile,
    RegionChoice,
    Replan,
    RouterView,
    ScalerSettings,
    Scaling,
    instances_needed,
)

__all__ = [
    "ABLATIONS",
    "DEFAULT_SET",
    "FLEET_TP_MODES",
    "MODES_PRIMARY_SLACK",
    "POLICY_SETS",
    "PROFILE_PERCENTILE",
    "SIMULATOR_SIDE",
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
    "miad_available",
    "policy_by_name",
    "policy_from_settings",
]


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
