"""The fault bench's scenario names, without the machinery that runs them.

:mod:`greenserve.faults` runs them; the CLI's parser (``greenserve bench faults --help``)
lists them from here without importing NATS, Redis and pandas.
"""

from __future__ import annotations

__all__ = ["ALL_SCENARIOS", "MULTIHOST_SCENARIOS"]

ALL_SCENARIOS = (
    "kill:classifier",
    "kill:scheduler",
    "kill:router",
    "kill:requestpath",
    "kill:planner",
    "kill:forecaster",
    "kill:dvfs-node-pjm",
    "kill:gateway",
    "drop:worker-0",
    "kill:worker-0",
    "term:worker-0",
    "restart:nats",
    "wipe:nats",
    "restart:redis",
    "down:redis",
    "refuse:redis",
    "kill:router+drop:worker-0",
    "kill:requestpath+drop:worker-0",
    # --- compound faults and freezes (issue 29): see SEQUENCED and FREEZE_S ---
    "restart:redis+kill:requestpath",
    "freeze:worker-0",
    # --- end compound faults and freezes ---
    # --- replicated servers (issue 33): see CLUSTER_SIZE and PROMOTED_WITHIN_S ---
    "kill:nats-1",
    "kill:nats-leader",
    "failover:redis",
    # --- supervised servers: the stack's supervisor restarts what crashed ---
    "crash:nats",
)
"""``kill:<process>`` = SIGKILL then restart; ``drop:<worker>`` = SIGKILL, no restart;
``term:<process>`` = SIGTERM (graceful drain), no restart; ``kill:worker-<i>`` runs with a
router heartbeat timeout (``greenserve.faults.scenario_run.RESTART_TIMEOUT_S``) the restart
beats, so the router sees the same worker id come back with a new ``started_at``;
``restart:<server>`` = SIGKILL the server and start it again on the same port and store;
``wipe:nats`` = SIGKILL nats-server, delete its JetStream store and start it again on the
same port: it comes back without the ingress stream and consumer, which their owners
create again (``shared/stream_keeper.py``) while publishers retry; what the lost store held
and no service had taken yet is gone with it;
``down:<server>`` = the same after an outage of ``outage_s`` (``greenserve.faults.OUTAGE_S``)
instead of the scenario's short downtime (``down:redis``: every hand-off fails for that long);
``refuse:redis`` = Redis up but refusing every write for ``outage_s`` (``NOREPLICAS``, as a
Redis that lost its replicas or its disk answers): hand-offs fail at once rather than after
a timeout, so this outage meets the most redeliveries.
``kill:nats-<i>`` = SIGKILL node i of a NATS cluster of
``greenserve.faults.scenario_names.CLUSTER_SIZE`` nodes (every JetStream resource R3), start
it again after ``greenserve.faults.replicated_servers.NODE_DOWN_S`` on its store;
``kill:nats-leader`` the same for the node that leads the ingress stream at the fault;
``failover:redis`` = SIGKILL the Redis primary of a primary/replica/Sentinels set, wait
until the Sentinels promote the replica (recovery counts from then), and start the old
primary again after the downtime, which the Sentinels make a replica of the new one.
``crash:<server>`` = SIGKILL the server and leave it down: the stack runs under ``greenserve
up``'s supervisor (:mod:`greenserve.local.supervisor`), which starts it again on its
command line, port and store; recovery counts from when it listens again.
``requestpath`` is the co-located classifier + scheduler + router process; a scenario that
names it runs on a stack with the request path co-located; one that names ``gateway``
replays through the OpenAI-compatible HTTP gateway instead of the ingress stream
(``greenserve.faults.scoring.score_http``: what an HTTP client sees of a gateway that dies,
sending again what the dead gateway's port refused). ``a+b`` injects
both faults at once and restarts what ``kill:`` or ``restart:`` names after the downtime:
a worker lost while the router that placed its requests is down (only Redis knows what it
held)."""

MULTIHOST_SCENARIOS = ("kill:nats-1", "kill:nats-leader", "failover:redis", "partition:host-2")
"""What ``--multihost`` runs by default: the replicated servers' faults with each node on
its own host, then ``partition:host-<i>``: host i (a NATS node, a Sentinel, a worker and
whatever else :data:`greenserve.multihost.stack.SERVICE_HOSTS` put there) cut off from the
other hosts and the client for ``greenserve.faults.PARTITION_S``, then joined again."""
