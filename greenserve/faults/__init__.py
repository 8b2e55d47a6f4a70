"""Fault injection during a replay: kill -9 a service, restart NATS or Redis (at once, or
after a long outage), drop a worker, freeze a process, partition a host.

Each scenario runs on a fresh local stack with its own servers: replay a stretch of the
conversation trace, inject the fault a third of the way in, restart what was killed after
``downtime_s``, and count what the client saw. A request is *lost* when neither a
completion nor an error reached the client; *duplicated* when it ended twice. Recovery is
the time from the restart to the first completion of a request sent after the fault.

The modules, by what they do:

- :mod:`.scenario_names`: what a scenario's name asks for (its faults, the stack it needs);
- :mod:`.scenario_run`: running one scenario (:func:`run_scenario`);
- :mod:`.injection`: injecting the faults into the stack and undoing them;
- :mod:`.scoring`: the result accounting (:class:`ScenarioResult`);
- :mod:`.replicated_servers`: the NATS cluster and Sentinel probes, and the
  client-on-killed-node check;
- :mod:`.stack_probes`: what the ingress stream holds, what a host's workers hold, the
  records left at the end;
- :mod:`.freeze`: a frozen process's late answers.

The scenario list itself is :mod:`greenserve.fault_scenarios`, light enough for the
CLI's parser. The names the CLI and the tests use are importable from here.
"""

from __future__ import annotations

from greenserve.fault_scenarios import ALL_SCENARIOS, MULTIHOST_SCENARIOS
from greenserve.faults.scenario_run import OUTAGE_S, PARTITION_S, run_scenario
from greenserve.faults.scoring import ScenarioResult

__all__ = [
    "ALL_SCENARIOS",
    "MULTIHOST_SCENARIOS",
    "OUTAGE_S",
    "PARTITION_S",
    "ScenarioResult",
    "run_scenario",
]
