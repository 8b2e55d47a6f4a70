"""Offline discrete-event cluster simulator composing the production policy cores.

Entry points: :func:`load_scenario` reads a scenario YAML file, :func:`policy_by_name` picks
a named policy set, :func:`simulate` runs one policy over a trace and returns a
:class:`SimResult` summarised by the same ``shared.metrics`` code as the live load generator.

Each name is imported from its module on first use (PEP 562), so that reading the policy
names (``loadgen.simulator.policies``, for a CLI's ``--help``) does not import the simulator,
numpy and pandas with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.lazy_exports import lazy_getattr

if TYPE_CHECKING:
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

_MODULE_OF = {
    "ClusterSimulator": "cluster",
    "simulate": "cluster",
    "POLICY_SETS": "policies",
    "PolicySet": "policies",
    "ScalerSettings": "policies",
    "policy_by_name": "policies",
    "SimResult": "results",
    "Scenario": "scenario",
    "load_scenario": "scenario",
}

__getattr__ = lazy_getattr(__name__, _MODULE_OF)
