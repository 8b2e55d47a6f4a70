"""Offline discrete-event cluster simulator composing the production policy cores.

Entry points: :func:`load_scenario` reads a scenario YAML file, :func:`policy_by_name` picks
a named policy set, :func:`simulate` runs one policy over a trace and returns a
:class:`SimResult` summarised by the same ``shared.metrics`` code as the live load generator.
"""

from __future__ import annotations

from loadgen.simulator.cluster import ClusterSimulator, simulate
from loadgen.simulator.policies import POLICY_SETS, PolicySet, ScalerSettings, policy_by_name
from loadgen.simulator.results import SimResult
from loadgen.simulator.scenario import Scenario, load_scenario

__all__ = [
    "POLICY_SETS",
    "ClusterSimulator",
    "PolicySet",
    "ScalerSettings",
    "Scenario",
    "SimResult",
    "load_scenario",
    "policy_by_name",
    "simulate",
]
