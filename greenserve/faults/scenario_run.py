"""Running one fault scenario: a fresh stack, a replay, the fault a third of the way in.

Each scenario runs on a fresh local stack (or multi-host stack) with its own servers:
replay a stretch of the trace, inject the fault (:mod:`.injection`) a third of the way in,
undo it after its downtime, and score what the client saw (:mod:`.scoring`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from greenserve.faults.freeze import FREEZE_S, FROZEN_CLIENT_ID, LISTEN_AFTER_THAW_S, LateEndings
from greenserve.faults.injection import inject, recover, server_named, wait_supervised
from greenserve.faults.replicated_servers import (
    NODE_DOWN_S,
    PROMOTED_WITHIN_S,
    client_on_killed_node,
    ingress_layout,
    stream_leader,
    wait_promoted,
)
from greenserve.faults.scenario_names import (
    LEADER,
    LONG_OUTAGES,
    MULTIHOST_HOSTS,
    RESTORED,
    check_multihost,
    cluster_size,
    faults_of,
    frozen,
    partitioned,
    supervised,
    with_sentinels,
)
from greenserve.faults.scoring import ScenarioResult, score, score_http
from greenserve.faults.stack_probes import (
    CONSISTENT_WITHIN_S,
    ingress_held,
    leftover_records,
    placed_on,
)
from greenserve.local import LocalStack, start_local_stack
from greenserve.local.supervisor import SupervisorSettings
from greenserve.multihost.fabric import Fabric, fabric
from greenserve.multihost.stack import PING_INTERVAL_S, start_multihost_stack
from greenserve.stack import StackSpec
from loadgen.http_replay import HttpRecord, replay_http
from loadgen.replay import ReplayResult, replay
from loadgen.traces import TraceRequest
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.config import NatsSettings

__all__ = [
    "HTTP_TIMEOUT_S",
    "OUTAGE_S",
    "PARTITION_S",
    "RESTART_TIMEOUT_S",
    "SETTLE_AFTER_OUTAGE_S",
    "SUPERVISED_WITHIN_S",
    "run_scenario",
]

HTTP_TIMEOUT_S = 30.0
"""An HTTP request unanswered this long (wall) counts as lost; a refused connection is
retried for as long (:func:`loadgen.http_replay.replay_http`), as OpenAI's client retries
connection errors."""
RESTART_TIMEOUT_S = 30.0
"""``router.worker_timeout_s`` of a scenario that kills and restarts a worker."""
OUTAGE_S = 30.0
"""How long (wall) a ``down:`` scenario keeps its server down: three times what the old
hand-off retries lasted (20 deliveries 0.5 s apart), so a cliff in them shows as lost
requests. Wall time, not model time: the retries and timeouts it tests run on the wall
clock whatever the speed-up."""
SETTLE_AFTER_OUTAGE_S = 30.0
"""How long the replay waits for a next answer beyond a ``down:`` outage (the hand-off
backoff reaches its 5 s ceiling within it)."""
PARTITION_S = 10.0
"""Wall seconds a host stays cut off."""
SUPERVISED_WITHIN_S = 30.0
"""How long a ``crash:`` scenario waits for the supervisor to bring its server back (the
first restart waits ``SupervisorSettings.first_backoff_s``, 0.5 s)."""


def _client_settings(stack: LocalStack, hosts: Fabric | None) -> NatsSettings:
    """The replay client's connection. On hosts it is a user on the first host's side of
    a partition (``partition:host-0`` cuts it off as well): it connects to that node and
    learns the others from it, to move to when that node is killed."""
    if hosts is None:
        return NatsSettings(url=stack.state.nats_url)
    first = stack.state.nats_url.split(",")[0]
    return NatsSettings(url=first, ping_interval_s=PING_INTERVAL_S)


async def _run(
    scenario: str,
    trace: list[TraceRequest],
    spec: StackSpec,
    folder: Path,
    downtime_s: float,
    hosts: Fabric | None = None,
) -> ScenarioResult:
    over_http = any(target == "gateway" for _, target in faults_of(scenario))
    long_outage = any(kind in LONG_OUTAGES for kind, _ in faults_of(scenario))
    held: int | None = None
    held_read_at = injected_at = 0.0
    cut_held: int | None = None
    on_killed: bool | None = None
    failover_s: float | None = None
    killed: str | None = None
    replicas: int | None = None
    leaders: dict[str, str] | None = None
    start: Callable[[], LocalStack] = (
        functools.partial(
            start_local_stack,
            spec,
            folder,
            nats_cluster=cluster_size(scenario),
            redis_sentinel=with_sentinels(scenario),
            # As ``greenserve up`` runs it; the other scenarios restart what they kill.
            supervise=SupervisorSettings() if supervised(scenario) else None,
        )
        if hosts is None
        else functools.partial(start_multihost_stack, spec, hosts, folder)
    )
    stack = await asyncio.to_thread(start)
    try:
        await asyncio.to_thread(stack.wait_ready)
        nc = (
            None
            if over_http
            else await connect_nats(_client_settings(stack, hosts), "faults-client")
        )
        late: LateEndings | None = None  # --- freeze scenarios: replies after the thaw ---
        if nc is not None and frozen(scenario):
            late = LateEndings()
            subjects = Subjects(spec.namespace)
            await nc.subscribe(subjects.client_wildcard(FROZEN_CLIENT_ID), cb=late.on_reply)
        try:
            replaying: asyncio.Task[ReplayResult | list[HttpRecord]]
            if nc is None:
                replaying = asyncio.create_task(
                    replay_http(
                        [stack.state.gateway_url or ""],
                        [dataclasses.replace(r, t_s=r.t_s / spec.speedup) for r in trace],
                        model=spec.model,
                        timeout_s=HTTP_TIMEOUT_S,
                        connect_retry_s=HTTP_TIMEOUT_S,
                    )
                )
            else:
                replaying = asyncio.create_task(
                    replay(
                        nc,
                        Subjects(spec.namespace),
                        trace,
                        model=spec.model,
                        speedup=spec.speedup,
                        settle_timeout_s=(
                            downtime_s + SETTLE_AFTER_OUTAGE_S if long_outage else 30.0
                        ),
                        client_id=FROZEN_CLIENT_ID if late is not None else None,
                    )
                )
            await asyncio.sleep(trace[len(trace) // 3].t_s / spec.speedup)
            if scenario == "wipe:nats" and nc is not None:
                held_read_at = time.time()
                held = await ingress_held(nc, spec.namespace)
            if any(target == LEADER for _, target in faults_of(scenario)) and nc is not None:
                killed = await stream_leader(nc, spec.namespace)
                scenario_run = scenario.replace(LEADER, killed)
            else:
                scenario_run = scenario
            if (cluster_size(scenario) > 1 or hosts is not None) and nc is not None:
                replicas, leaders = await ingress_layout(nc, spec.namespace)
            # A partition is survived by the hosts left, as a lost node by the others.
            survived = (
                cluster_size(scenario) > 1 or with_sentinels(scenario) or partitioned(scenario)
            )
            on_killed = client_on_killed_node(stack, nc, scenario_run)
            primary = server_named(stack, "redis")
            old_primary = stack.servers[primary].address if primary is not None else ""
            cut = [target for kind, target in faults_of(scenario) if kind == "partition"]
            if cut:
                cut_held = sum([await placed_on(stack, spec.namespace, h) for h in cut])
            fault_at = time.time()
            await asyncio.to_thread(inject, stack, spec, scenario_run, folder, hosts)
            injected_at = time.time()
            restored_at = fault_at
            if with_sentinels(scenario):
                await asyncio.to_thread(wait_promoted, stack, old_primary, PROMOTED_WITHIN_S)
                restored_at = time.time()
                failover_s = restored_at - fault_at
            if supervised(scenario):
                await asyncio.to_thread(wait_supervised, stack, scenario, SUPERVISED_WITHIN_S)
                restored_at = time.time()
            if any(kind in RESTORED for kind, _ in faults_of(scenario)):
                await asyncio.sleep(downtime_s)
                await asyncio.to_thread(recover, stack, spec, scenario_run, folder, hosts)
                # A freeze is survived, not restored (see FREEZE_S); a replicated server's
                # loss is survived by the others, and its restart is no recovery.
                if not frozen(scenario) and not survived:
                    restored_at = time.time()
            result = await replaying
            if late is not None:
                await asyncio.sleep(LISTEN_AFTER_THAW_S)
            leftover = await leftover_records(stack, spec.namespace, CONSISTENT_WITHIN_S)
        finally:
            if nc is not None:
                await nc.close()
        exit_codes: dict[str, int | None] = {}
        for kind, name in faults_of(scenario):
            if kind == "term":
                exit_codes[scenario] = await asyncio.to_thread(stack.group.procs[name].wait, 15)
    finally:
        await asyncio.to_thread(stack.stop)
    if isinstance(result, list):
        return score_http(scenario, result, fault_at, restored_at, leftover)
    outcome = score(scenario, result, fault_at, restored_at, exit_codes, leftover)
    if held is not None:
        # A request published between the read and the kill may have been stored (and acked
        # to its client) in the store the kill deleted.
        sent_meanwhile = sum(1 for r in result.records if held_read_at <= r.sent_at <= injected_at)
        outcome = dataclasses.replace(outcome, held_by_lost_store=held + sent_meanwhile)
    if cut_held is not None:
        outcome = dataclasses.replace(outcome, held_by_cut_host=cut_held)
    if failover_s is not None or replicas is not None:
        outcome = dataclasses.replace(
            outcome,
            failover_s=failover_s,
            killed_node=killed,
            stream_replicas=replicas,
            ingress_leaders=leaders,
            client_on_killed_node=on_killed,
        )
    if late is not None:  # the replay stopped listening before the thaw; this did not
        outcome = dataclasses.replace(
            outcome, duplicated=max(outcome.duplicated, late.duplicated())
        )
    return outcome


def run_scenario(
    scenario: str,
    trace: list[TraceRequest],
    *,
    workers: int = 2,
    speedup: float = 10.0,
    downtime_s: float = 1.0,
    outage_s: float = OUTAGE_S,
    colocate_request_path: bool | None = None,
    multihost: bool = False,
    delays_ms: Sequence[float] = (),
) -> ScenarioResult:
    """Run one scenario on a fresh stack in a temporary folder.

    ``downtime_s`` (wall) passes between a ``kill:``/``restart:`` fault and the restart,
    ``outage_s`` between a ``down:`` fault and the restart. ``colocate_request_path`` None
    co-locates only for a scenario that names ``requestpath``. ``multihost`` runs the stack
    over :data:`MULTIHOST_HOSTS` network-namespace hosts (:mod:`greenserve.multihost`),
    always with a NATS cluster and Redis with Sentinels; ``delays_ms`` delays what host i
    sends by ``delays_ms[i]`` (:func:`greenserve.multihost.fabric.fabric`).

    Raises:
        ValueError: a scenario the multi-host stack cannot run, or ``partition:`` without
            ``multihost``.
        greenserve.multihost.fabric.FabricError: the hosts could not be made here.
    """
    if multihost:
        check_multihost(scenario)
    elif delays_ms:
        raise ValueError("network delays need the multi-host stack (multihost=True)")
    elif partitioned(scenario):
        raise ValueError(f"{scenario!r} needs the multi-host stack (--multihost)")
    colocate = (
        any(target == "requestpath" for _, target in faults_of(scenario))
        if colocate_request_path is None
        else colocate_request_path
    )
    restarts_worker = any(
        kind == "kill" and target.startswith("worker-") for kind, target in faults_of(scenario)
    )
    spec = StackSpec(
        namespace="faults",
        workers=workers,
        regions=("PJM",),
        speedup=speedup,
        colocate_request_path=colocate,
        # The restarted worker must be back before the router would call it silent (else
        # this is ``drop:`` again): what it held is lost to the restart, not to silence.
        # Its lease must outlast the timeout (``router.lease_s``).
        extra=(
            {"router": {"worker_timeout_s": RESTART_TIMEOUT_S, "lease_s": 2 * RESTART_TIMEOUT_S}}
            if restarts_worker
            else {}
        ),
    )
    with tempfile.TemporaryDirectory(prefix="gs-faults-") as folder:
        long_outage = any(kind in LONG_OUTAGES for kind, _ in faults_of(scenario))
        down_for = outage_s if long_outage else downtime_s
        if frozen(scenario):
            down_for = FREEZE_S
        if cluster_size(scenario) > 1:
            down_for = max(down_for, NODE_DOWN_S)
        if partitioned(scenario):
            down_for = max(down_for, PARTITION_S)
        if not multihost:
            return asyncio.run(_run(scenario, trace, spec, Path(folder), down_for))
        with fabric(MULTIHOST_HOSTS, delays_ms) as hosts:
            return asyncio.run(_run(scenario, trace, spec, Path(folder), down_for, hosts))
