"""What a fault scenario's name asks for: its faults, and the stack it must run on.

A scenario is ``kind:target`` faults joined by ``+`` (``kill:router+drop:worker-0``);
:mod:`greenserve.fault_scenarios` lists them and says what each does.
"""

from __future__ import annotations

__all__ = [
    "CLUSTER_SIZE",
    "LEADER",
    "LONG_OUTAGES",
    "MULTIHOST_HOSTS",
    "MULTIHOST_KINDS",
    "RESTORED",
    "SEQUENCED",
    "check_multihost",
    "cluster_size",
    "faults_of",
    "frozen",
    "partitioned",
    "supervised",
    "with_sentinels",
]

LONG_OUTAGES = ("down", "refuse")
"""Fault kinds that last ``outage_s`` rather than the short ``downtime_s``."""
RESTORED = ("kill", "restart", "wipe", "freeze", "failover", "partition", *LONG_OUTAGES)
"""Fault kinds undone after their downtime (``drop:`` and ``term:`` are not)."""
SEQUENCED = ("restart:redis+kill:requestpath",)
"""Scenarios whose faults follow each other instead of coming at once: Redis restarts
*empty* (its append-only file removed, as a Redis without persistence or with a lost disk
comes back), then :data:`greenserve.faults.injection.KILL_AFTER_WIPE_S` later the request
path is killed, and restarted after the downtime. Only what the services wrote back to
the empty Redis survives the kill."""
CLUSTER_SIZE = 3
"""NATS nodes of a stack whose scenario names a node (``nats-<i>``, ``nats-leader``)."""
LEADER = "nats-leader"
"""The target that names whichever node leads the ingress stream when the fault comes."""
MULTIHOST_HOSTS = 3
"""Network-namespace hosts of a multi-host stack (:mod:`greenserve.multihost`)."""
MULTIHOST_KINDS = ("kill", "failover", "partition")
"""Fault kinds the multi-host stack runs."""


def faults_of(scenario: str) -> list[tuple[str, str]]:
    """(kind, target) of each fault of a scenario, in injection order."""
    return [(kind, target) for kind, _, target in (p.partition(":") for p in scenario.split("+"))]


def frozen(scenario: str) -> bool:
    """Whether a scenario freezes a process (SIGSTOP, then SIGCONT after
    :data:`greenserve.faults.scenario_run.FREEZE_S`)."""
    return any(kind == "freeze" for kind, _ in faults_of(scenario))


def cluster_size(scenario: str) -> int:
    """NATS nodes the scenario's stack runs: a cluster if it names a node."""
    named = any(t == LEADER or t.startswith("nats-") for _, t in faults_of(scenario))
    return CLUSTER_SIZE if named else 1


def with_sentinels(scenario: str) -> bool:
    """Whether the scenario's Redis runs with Sentinels (it fails the primary over)."""
    return any(kind == "failover" for kind, _ in faults_of(scenario))


def supervised(scenario: str) -> bool:
    """Whether the scenario's stack runs under ``up``'s supervisor: ``crash:<server>``
    leaves the restart to it, as a stack started by ``greenserve up`` does."""
    return any(kind == "crash" for kind, _ in faults_of(scenario))


def partitioned(scenario: str) -> bool:
    """Whether the scenario cuts a host off (multi-host stack only)."""
    return any(kind == "partition" for kind, _ in faults_of(scenario))


def check_multihost(scenario: str) -> None:
    """Refuse what a multi-host stack cannot run: a fault other than killing a server,
    failing Redis over or a partition (a killed service would come back on this host).

    Raises:
        ValueError: naming the fault and what runs.
    """
    for kind, target in faults_of(scenario):
        server = target == LEADER or target.startswith("nats-") or target == "redis"
        if kind not in MULTIHOST_KINDS or (kind != "partition" and not server):
            raise ValueError(
                f"{kind}:{target} does not run on the multi-host stack; it runs kill:nats-<i>, "
                f"kill:{LEADER}, failover:redis and partition:host-<i>"
            )
