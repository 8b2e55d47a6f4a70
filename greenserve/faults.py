"""Fault injection during a replay: kill -9 a service, restart NATS or Redis (at once, or
after a long outage), drop a worker.

Each scenario runs on a fresh local stack with its own servers: replay a stretch of the
conversation trace, inject the fault a third of the way in, restart what was killed after
``downtime_s``, and count what the client saw. A request is *lost* when neither a
completion nor an error reached the client; *duplicated* when it ended twice. Recovery is
the time from the restart to the first completion of a request sent after the fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nats.aio.client import Client
from nats.aio.msg import Msg
from redis import Redis as SyncRedis

from greenserve.fault_scenarios import ALL_SCENARIOS, MULTIHOST_SCENARIOS
from greenserve.local import LocalStack, start_local_stack
from greenserve.multihost.fabric import Fabric, fabric
from greenserve.multihost.stack import PING_INTERVAL_S, host_of, start_multihost_stack
from greenserve.runner import start_process
from greenserve.stack import StackSpec, stack_launches
from loadgen.http_replay import HttpRecord, replay_http
from loadgen.replay import ReplayResult, replay
from loadgen.traces import TraceRequest
from proto.codec import DecodeError, decode_any
from proto.keys import Keys
from proto.messages import Assignment, Completion, ErrorReply
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.redis_sentinel import master_address
from shared.servers import start_nats, start_redis
from shared.store import as_bytes

__all__ = [
    "ALL_SCENARIOS",
    "MULTIHOST_SCENARIOS",
    "OUTAGE_S",
    "ScenarioResult",
    "run_scenario",
]

CONSISTENT_WITHIN_S = 12.0
"""After the replay ends, how long the stack may take to forget every ended request: two
periods of the scheduler's audit of endings it never heard (``shared/ended_lookup.py``)."""
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
LONG_OUTAGES = ("down", "refuse")
"""Fault kinds that last ``outage_s`` rather than the short ``downtime_s``."""
RESTORED = ("kill", "restart", "wipe", "freeze", "failover", "partition", *LONG_OUTAGES)
"""Fault kinds undone after their downtime (``drop:`` and ``term:`` are not)."""
SETTLE_AFTER_OUTAGE_S = 30.0
"""How long the replay waits for a next answer beyond a ``down:`` outage (the hand-off
backoff reaches its 5 s ceiling within it)."""


# --- compound faults and freezes (issue 29) ---
SEQUENCED = ("restart:redis+kill:requestpath",)
"""Scenarios whose faults follow each other instead of coming at once: Redis restarts
*empty* (its append-only file removed, as a Redis without persistence or with a lost disk
comes back), then :data:`KILL_AFTER_WIPE_S` later the request path is killed, and restarted
after the downtime. Only what the services wrote back to the empty Redis survives the kill."""
KILL_AFTER_WIPE_S = 3.0
"""Wall seconds between the empty Redis's restart and the request path's kill."""
KILLED_FOR_S = 1.0
"""Wall seconds the request path stays dead in a sequenced scenario (``run_scenario``'s
default ``downtime_s``)."""
FREEZE_S = 20.0
"""Wall seconds a ``freeze:<process>`` scenario keeps the process stopped (SIGSTOP, then
SIGCONT): far past ``router.worker_timeout_s``, so the router runs a frozen worker's
requests elsewhere and the worker, woken, must not answer them too. The stack recovers
without the frozen worker, as from ``drop:``, so recovery counts from the freeze."""


def _frozen(scenario: str) -> bool:
    """Whether a scenario freezes a process (SIGSTOP, then SIGCONT after :data:`FREEZE_S`)."""
    return any(kind == "freeze" for kind, _ in _faults(scenario))


FROZEN_CLIENT_ID = "faults-freeze"
"""Client id of a freeze scenario's replay, so :class:`_LateEndings` hears its replies."""
LISTEN_AFTER_THAW_S = 5.0
"""How long (wall) a freeze scenario keeps listening to its client's replies after the
SIGCONT: what the woken worker would answer a second time comes then, and the replay itself
stops listening once every request has ended (on the other worker, during the freeze)."""


class _LateEndings:
    """Every ending sent to one client for the whole scenario, the thaw included."""

    def __init__(self) -> None:
        self._endings: dict[str, list[object]] = {}

    async def on_reply(self, msg: Msg) -> None:
        """Note a completion or error (a chunk or anything undecodable is no ending)."""
        with contextlib.suppress(DecodeError):
            message = decode_any(msg.data)
            if isinstance(message, Completion | ErrorReply) and message.request_id:
                self._endings.setdefault(message.request_id, []).append(message)

    def duplicated(self) -> int:
        """Endings beyond each request's first, counted as the replay counts them: an exact
        repeat (a re-send after a NATS outage) is none."""
        return sum(
            sum(1 for e in endings[1:] if e != endings[0]) for endings in self._endings.values()
        )


# --- end compound faults and freezes ---

# --- replicated servers (issue 33) ---
CLUSTER_SIZE = 3
"""NATS nodes of a stack whose scenario names a node (``nats-<i>``, ``nats-leader``)."""
NODE_DOWN_S = 10.0
"""Wall seconds a killed cluster node stays down: long enough that the requests of the
replay's middle third are served by the two nodes left, not by the node come back."""
PROMOTED_WITHIN_S = 30.0
"""How long ``failover:redis`` waits for the Sentinels to name a new primary."""
LEADER = "nats-leader"


def _cluster_size(scenario: str) -> int:
    """NATS nodes the scenario's stack runs: a cluster if it names a node."""
    named = any(t == LEADER or t.startswith("nats-") for _, t in _faults(scenario))
    return CLUSTER_SIZE if named else 1


def _with_sentinels(scenario: str) -> bool:
    return any(kind == "failover" for kind, _ in _faults(scenario))


def _server_named(stack: LocalStack, name: str) -> int | None:
    """Index in ``stack.servers`` of the server called ``name``, if it is one."""
    return next((i for i, s in enumerate(stack.servers) if s.name == name), None)


def _client_on_killed_node(stack: LocalStack, nc: Client | None, scenario: str) -> bool | None:
    """Whether ``nc`` is connected to a NATS node the scenario kills (``None``: kills none)."""
    ports = [
        stack.servers[index].port
        for kind, target in _faults(scenario)
        if kind == "kill" and target.startswith("nats-")
        and (index := _server_named(stack, target)) is not None
    ]  # fmt: skip
    if not ports:
        return None
    url = nc.connected_url if nc is not None else None
    return url is not None and url.port in ports


async def _stream_leader(nc: Client, namespace: str) -> str:
    """The NATS node that leads the ingress stream now."""
    info = await nc.jetstream().stream_info(Subjects(namespace).ingress_stream)
    if info.cluster is None or not info.cluster.leader:
        raise RuntimeError("the ingress stream has no cluster leader (not a cluster?)")
    return info.cluster.leader


async def _stream_replicas(nc: Client, namespace: str) -> int:
    """The ingress stream's configured replicas."""
    info = await nc.jetstream().stream_info(Subjects(namespace).ingress_stream)
    return int(info.config.num_replicas or 1)


def _wait_promoted(stack: LocalStack, old_primary: str, within_s: float) -> None:
    """Wait until the Sentinels name a primary other than ``old_primary`` (host:port).

    Raises:
        RuntimeError: none promoted within ``within_s``.
    """
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        named = master_address(stack.state.redis_sentinels, stack.state.redis_master_name)
        if named is not None and named != old_primary:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the Sentinels promoted no replica within {within_s:g} s")


# --- end replicated servers ---

# --- multi-host (issue 33): see greenserve.multihost ---
MULTIHOST_HOSTS = 3
PARTITION_S = 10.0
"""Wall seconds a host stays cut off."""
MULTIHOST_KINDS = ("kill", "failover", "partition")


def _check_multihost(scenario: str) -> None:
    """Refuse what a multi-host stack cannot run: a fault other than killing a server,
    failing Redis over or a partition (a killed service would come back on this host).

    Raises:
        ValueError: naming the fault and what runs.
    """
    for kind, target in _faults(scenario):
        server = target == LEADER or target.startswith("nats-") or target == "redis"
        if kind not in MULTIHOST_KINDS or (kind != "partition" and not server):
            raise ValueError(
                f"{kind}:{target} does not run on the multi-host stack; it runs kill:nats-<i>, "
                f"kill:{LEADER}, failover:redis and partition:host-<i>"
            )


async def _placed_on(stack: LocalStack, namespace: str, host: str) -> int:
    """Requests recorded as placed on a worker of ``host`` (``host-<i>``) now."""
    index = int(host.rpartition("-")[2])
    hosts = MULTIHOST_HOSTS
    redis = stack.state.redis_client(read_timeout_s=2.0)
    try:
        raw = await redis.hvals(Keys(namespace).dispatched)
    finally:
        await redis.aclose()
    placed = 0
    for value in raw:
        with contextlib.suppress(DecodeError):
            assignment = decode_any(as_bytes(value))
            if isinstance(assignment, Assignment):
                placed += host_of(assignment.worker_id, hosts) == index
    return placed


def _client_settings(stack: LocalStack, hosts: Fabric | None) -> NatsSettings:
    """The replay client's connection. On hosts it is a user on the first host's side of
    a partition (``partition:host-0`` cuts it off as well): it connects to that node and
    learns the others from it, to move to when that node is killed."""
    if hosts is None:
        return NatsSettings(url=stack.state.nats_url)
    first = stack.state.nats_url.split(",")[0]
    return NatsSettings(url=first, ping_interval_s=PING_INTERVAL_S)


def _partitioned(scenario: str) -> bool:
    return any(kind == "partition" for kind, _ in _faults(scenario))


# --- end multi-host ---


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """Outcome of one scenario."""

    scenario: str
    requests: int
    completed: int
    failed: int
    lost: int
    duplicated: int
    recovery_s: float | None
    errors: dict[str, int]
    token_mismatch: int = 0
    """Completed requests whose delivered tokens differ from what they asked for."""
    held_by_lost_store: int | None = None
    """``wipe:nats``: requests the ingress stream may have held when its store was deleted:
    those it held (stored, not yet acked by a classifier) when read just before the kill,
    plus those sent between that read and the kill (stored by then if acked). The most the
    wipe can lose."""
    exit_codes: dict[str, int | None] = dataclasses.field(default_factory=dict)
    """Exit status of processes stopped gracefully (``term:``); 0 is a clean drain."""
    leftover_records: int = 0
    """Requests still recorded as queued or placed in Redis :data:`CONSISTENT_WITHIN_S`
    after every request ended: state a restart would act on (re-queue, re-dispatch) though
    nothing is left to do. A consistent stack holds none."""
    failover_s: float | None = None
    """``failover:redis``: seconds from the primary's kill until the Sentinels named the
    replica primary (Redis refused the stack's writes meanwhile)."""
    killed_node: str | None = None
    """``kill:nats-leader``: the node that led the ingress stream and was killed."""
    stream_replicas: int | None = None
    """On a NATS cluster: the ingress stream's replicas just before the fault."""
    client_on_killed_node: bool | None = None
    """``kill:nats-*``: whether the replaying client was connected to the node killed. Its
    subscriptions move to another node on reconnect, and what was published to it
    meanwhile (core NATS, at most once: token chunks, an ending) does not reach it."""
    held_by_cut_host: int | None = None
    """``partition:``: requests placed on the cut-off host's workers just before the cut.
    The router runs them elsewhere once it stops hearing those workers, and a worker that
    finished one meanwhile sends its answer when the host is joined again: the most the
    partition can answer twice (``docs/deploy.md``, Multi-host on one machine)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dataclasses.asdict(self)


def _faults(scenario: str) -> list[tuple[str, str]]:
    """(kind, target) of each fault of a scenario, in injection order."""
    return [(kind, target) for kind, _, target in (p.partition(":") for p in scenario.split("+"))]


async def _ingress_held(nc: Client, namespace: str) -> int:
    """Messages the ingress stream holds now (work-queue retention: stored, not yet acked)."""
    info = await nc.jetstream().stream_info(Subjects(namespace).ingress_stream)
    return int(info.state.messages)


def _inject(
    stack: LocalStack, spec: StackSpec, scenario: str, folder: Path, hosts: Fabric | None = None
) -> None:
    if scenario in SEQUENCED:  # the first fault now, the rest in _recover_sequenced
        kind, target = _faults(scenario)[0]
        _inject_one(stack, kind, target, scenario)
        return
    for kind, target in _faults(scenario):
        _inject_one(stack, kind, target, scenario, hosts)


def _inject_one(
    stack: LocalStack, kind: str, target: str, scenario: str, hosts: Fabric | None = None
) -> None:
    named = _server_named(stack, target)
    if kind == "partition":
        if hosts is None:
            raise ValueError(f"{scenario!r} needs the multi-host stack (--multihost)")
        hosts.partition(target)
    elif kind in ("kill", "failover") and named is not None:
        stack.servers[named].kill()
    elif kind in ("kill", "drop"):
        proc = stack.group.procs[target]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    elif kind == "term":
        os.kill(stack.group.procs[target].pid, signal.SIGTERM)
    elif kind in ("restart", "down"):
        server = next(s for s in stack.servers if s.name == target)
        server.kill()
    elif kind == "wipe" and target == "nats":
        server = next(s for s in stack.servers if s.name == target)
        server.kill()
        # As a volume lost with its pod: the server starts again from an empty store.
        shutil.rmtree(server.workdir / "jetstream", ignore_errors=True)
    elif kind == "refuse" and target == "redis":
        _refuse_writes(stack.state.redis_url, refuse=True)
    elif kind == "freeze":
        os.kill(stack.group.procs[target].pid, signal.SIGSTOP)
    else:
        raise ValueError(f"unknown fault {scenario!r}")


def _recover(
    stack: LocalStack, spec: StackSpec, scenario: str, folder: Path, hosts: Fabric | None = None
) -> None:
    if scenario in SEQUENCED:
        _recover_sequenced(stack, spec, scenario, folder)
        return
    for kind, target in _faults(scenario):
        if kind == "partition" and hosts is not None:
            hosts.heal(target)
        else:
            _recover_one(stack, spec, kind, target, folder)


# --- compound faults and freezes (issue 29) ---
def _recover_sequenced(stack: LocalStack, spec: StackSpec, scenario: str, folder: Path) -> None:
    """Bring the first fault's server back empty, then inject and undo the second fault."""
    (_, server_name), (kind, target) = _faults(scenario)
    index = next(i for i, s in enumerate(stack.servers) if s.name == server_name)
    old = stack.servers[index]
    for aof in (old.workdir / "appendonlydir", old.workdir / "appendonly.aof"):
        if aof.is_dir():
            shutil.rmtree(aof)
        elif aof.exists():
            aof.unlink()
    stack.servers[index] = start_redis(old.workdir, old.port)
    time.sleep(KILL_AFTER_WIPE_S)
    _inject_one(stack, kind, target, scenario)
    time.sleep(KILLED_FOR_S)
    _recover_one(stack, spec, kind, target, folder)


# --- end compound faults and freezes ---


def _recover_one(stack: LocalStack, spec: StackSpec, kind: str, target: str, folder: Path) -> None:
    named = _server_named(stack, target)
    if kind in ("kill", "failover") and named is not None:
        # Same port, store and options: a node rejoins its cluster, an old primary is
        # made a replica of the promoted one by the Sentinels.
        stack.servers[named] = stack.servers[named].restart()
    elif kind == "kill":
        full = dataclasses.replace(
            spec,
            nats_url=stack.state.nats_url,
            nats_replicas=stack.state.nats_replicas,
            redis_url=stack.state.redis_url,
            redis_sentinels=tuple(stack.state.redis_sentinels),
            redis_master_name=stack.state.redis_master_name,
            origin_wall_s=stack.state.origin_wall_s,
            # A restarted gateway listens where its clients (and their balancer) send.
            gateway_port=urlsplit(stack.state.gateway_url or "").port or 0,
        )
        launch = next(x for x in stack_launches(full) if x.name == target)
        stack.group.procs[target] = start_process(launch, folder)
    elif kind == "refuse":
        _refuse_writes(stack.state.redis_url, refuse=False)
    elif kind == "freeze":
        os.kill(stack.group.procs[target].pid, signal.SIGCONT)
    elif kind in ("restart", "down", "wipe"):
        index = next(i for i, s in enumerate(stack.servers) if s.name == target)
        old = stack.servers[index]
        start = start_nats if target == "nats" else start_redis
        stack.servers[index] = start(old.workdir, old.port)


def _refuse_writes(redis_url: str, *, refuse: bool) -> None:
    """Make Redis refuse every write (it requires a replica it does not have), or not."""
    client = SyncRedis.from_url(redis_url)
    try:
        client.config_set("min-replicas-to-write", 1 if refuse else 0)
    finally:
        client.close()


def _score(
    scenario: str,
    result: ReplayResult,
    fault_at: float,
    restored_at: float,
    exit_codes: dict[str, int | None],
    leftover: int,
) -> ScenarioResult:
    records = result.records
    after = [
        r.completion.finished_at
        for r in records
        if r.completion is not None
        and r.sent_at >= fault_at
        and r.completion.finished_at >= restored_at
    ]
    errors: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            errors[r.error.code] = errors.get(r.error.code, 0) + 1
    completed = sum(1 for r in records if r.completion is not None)
    failed = sum(1 for r in records if r.completion is None and r.error is not None)
    return ScenarioResult(
        scenario=scenario,
        requests=len(records),
        completed=completed,
        failed=failed,
        lost=len(records) - completed - failed,
        duplicated=sum(r.duplicate_endings for r in records),
        recovery_s=(min(after) - restored_at) if after else None,
        errors=errors,
        token_mismatch=sum(
            1
            for r in records
            if r.completion is not None and len(r.token_times) != r.trace.output_tokens
        ),
        exit_codes=exit_codes,
        leftover_records=leftover,
    )


def _score_http(
    scenario: str,
    records: list[HttpRecord],
    fault_at: float,
    restored_at: float,
    leftover: int,
) -> ScenarioResult:
    """An HTTP client's view: a request is completed when answered 200 (``token_mismatch``
    when with fewer tokens than asked), *failed* when it ended with an explicit error (an
    error status, the connection cut with the request on it, or refused for longer than
    the client retries: the client knows) and *lost* when no answer came before the
    client's timeout (the gateway took it and never answered). One response per request:
    nothing can end twice."""
    completed = [r for r in records if r.status == 200]
    lost = [r for r in records if r.error == TimeoutError.__name__]
    errors: dict[str, int] = {}
    for r in records:
        if r.status != 200 and r not in lost:
            code = r.error or f"http_{r.status}"
            errors[code] = errors.get(code, 0) + 1
    after = [r.ended_at for r in completed if r.sent_at >= fault_at and r.ended_at >= restored_at]
    return ScenarioResult(
        scenario=scenario,
        requests=len(records),
        completed=len(completed),
        failed=len(records) - len(completed) - len(lost),
        lost=len(lost),
        duplicated=0,
        recovery_s=(min(after) - restored_at) if after else None,
        errors=errors,
        token_mismatch=sum(1 for r in completed if not r.ok),
        leftover_records=leftover,
    )


async def _leftover_records(stack: LocalStack, namespace: str, within_s: float) -> int:
    """Requests still in ``queued`` or ``dispatched`` once ``within_s`` has passed (0 as soon
    as both are empty), read from the stack's primary (after a failover, the promoted one)."""
    keys = Keys(namespace)
    redis = stack.state.redis_client(read_timeout_s=2.0)
    try:
        deadline = time.monotonic() + within_s
        while True:
            left = int(await redis.hlen(keys.queued)) + int(await redis.hlen(keys.dispatched))
            if left == 0 or time.monotonic() >= deadline:
                return left
            await asyncio.sleep(0.2)
    finally:
        await redis.aclose()


async def _run(
    scenario: str,
    trace: list[TraceRequest],
    spec: StackSpec,
    folder: Path,
    downtime_s: float,
    hosts: Fabric | None = None,
) -> ScenarioResult:
    over_http = any(target == "gateway" for _, target in _faults(scenario))
    long_outage = any(kind in LONG_OUTAGES for kind, _ in _faults(scenario))
    held: int | None = None
    held_read_at = injected_at = 0.0
    cut_held: int | None = None
    on_killed: bool | None = None
    failover_s: float | None = None
    killed: str | None = None
    replicas: int | None = None
    start: Callable[[], LocalStack] = (
        functools.partial(
            start_local_stack,
            spec,
            folder,
            nats_cluster=_cluster_size(scenario),
            redis_sentinel=_with_sentinels(scenario),
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
        late: _LateEndings | None = None  # --- freeze scenarios: replies after the thaw ---
        if nc is not None and _frozen(scenario):
            late = _LateEndings()
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
                held = await _ingress_held(nc, spec.namespace)
            if any(target == LEADER for _, target in _faults(scenario)) and nc is not None:
                killed = await _stream_leader(nc, spec.namespace)
                scenario_run = scenario.replace(LEADER, killed)
            else:
                scenario_run = scenario
            if (_cluster_size(scenario) > 1 or hosts is not None) and nc is not None:
                replicas = await _stream_replicas(nc, spec.namespace)
            # A partition is survived by the hosts left, as a lost node by the others.
            survived = (
                _cluster_size(scenario) > 1 or _with_sentinels(scenario) or _partitioned(scenario)
            )
            on_killed = _client_on_killed_node(stack, nc, scenario_run)
            primary = _server_named(stack, "redis")
            old_primary = stack.servers[primary].address if primary is not None else ""
            cut = [target for kind, target in _faults(scenario) if kind == "partition"]
            if cut:
                cut_held = sum([await _placed_on(stack, spec.namespace, h) for h in cut])
            fault_at = time.time()
            await asyncio.to_thread(_inject, stack, spec, scenario_run, folder, hosts)
            injected_at = time.time()
            restored_at = fault_at
            if _with_sentinels(scenario):
                await asyncio.to_thread(_wait_promoted, stack, old_primary, PROMOTED_WITHIN_S)
                restored_at = time.time()
                failover_s = restored_at - fault_at
            if any(kind in RESTORED for kind, _ in _faults(scenario)):
                await asyncio.sleep(downtime_s)
                await asyncio.to_thread(_recover, stack, spec, scenario_run, folder, hosts)
                # A freeze is survived, not restored (see FREEZE_S); a replicated server's
                # loss is survived by the others, and its restart is no recovery.
                if not _frozen(scenario) and not survived:
                    restored_at = time.time()
            result = await replaying
            if late is not None:
                await asyncio.sleep(LISTEN_AFTER_THAW_S)
            leftover = await _leftover_records(stack, spec.namespace, CONSISTENT_WITHIN_S)
        finally:
            if nc is not None:
                await nc.close()
        exit_codes: dict[str, int | None] = {}
        for kind, name in _faults(scenario):
            if kind == "term":
                exit_codes[scenario] = await asyncio.to_thread(stack.group.procs[name].wait, 15)
    finally:
        await asyncio.to_thread(stack.stop)
    if isinstance(result, list):
        return _score_http(scenario, result, fault_at, restored_at, leftover)
    outcome = _score(scenario, result, fault_at, restored_at, exit_codes, leftover)
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
) -> ScenarioResult:
    """Run one scenario on a fresh stack in a temporary folder.

    ``downtime_s`` (wall) passes between a ``kill:``/``restart:`` fault and the restart,
    ``outage_s`` between a ``down:`` fault and the restart. ``colocate_request_path`` None
    co-locates only for a scenario that names ``requestpath``. ``multihost`` runs the stack
    over :data:`MULTIHOST_HOSTS` network-namespace hosts (:mod:`greenserve.multihost`),
    always with a NATS cluster and Redis with Sentinels.

    Raises:
        ValueError: a scenario the multi-host stack cannot run, or ``partition:`` without
            ``multihost``.
        greenserve.multihost.fabric.FabricError: the hosts could not be made here.
    """
    if multihost:
        _check_multihost(scenario)
    elif _partitioned(scenario):
        raise ValueError(f"{scenario!r} needs the multi-host stack (--multihost)")
    colocate = (
        any(target == "requestpath" for _, target in _faults(scenario))
        if colocate_request_path is None
        else colocate_request_path
    )
    restarts_worker = any(
        kind == "kill" and target.startswith("worker-") for kind, target in _faults(scenario)
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
        long_outage = any(kind in LONG_OUTAGES for kind, _ in _faults(scenario))
        down_for = outage_s if long_outage else downtime_s
        if _frozen(scenario):
            down_for = FREEZE_S
        if _cluster_size(scenario) > 1:
            down_for = max(down_for, NODE_DOWN_S)
        if _partitioned(scenario):
            down_for = max(down_for, PARTITION_S)
        if not multihost:
            return asyncio.run(_run(scenario, trace, spec, Path(folder), down_for))
        with fabric(MULTIHOST_HOSTS) as hosts:
            return asyncio.run(_run(scenario, trace, spec, Path(folder), down_for, hosts))
