"""Injecting a scenario's faults into a running local stack, and undoing them.

Processes are killed (SIGKILL), stopped (SIGTERM) or frozen (SIGSTOP) by their pid; NATS and
Redis servers are killed and started again on the same port and store (``crash:`` leaves
that to the stack's supervisor) (``wipe:nats`` with
its JetStream store deleted, the sequenced Redis restart with its append-only file
removed); ``refuse:redis`` makes Redis refuse every write; a partition cuts a host off the
multi-host fabric.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import time
from pathlib import Path
from urllib.parse import urlsplit

from redis import Redis as SyncRedis

from greenserve.faults.scenario_names import SEQUENCED, faults_of
from greenserve.local import LocalStack, load_state
from greenserve.multihost.fabric import Fabric
from greenserve.runner import start_process
from greenserve.stack import StackSpec, stack_launches
from shared.servers import start_nats, start_redis, wait_for_port

__all__ = [
    "KILLED_FOR_S",
    "KILL_AFTER_WIPE_S",
    "inject",
    "recover",
    "server_named",
    "wait_supervised",
]

KILL_AFTER_WIPE_S = 3.0
"""Wall seconds between the empty Redis's restart and the request path's kill (a
:data:`~greenserve.faults.scenario_names.SEQUENCED` scenario)."""
KILLED_FOR_S = 1.0
"""Wall seconds the request path stays dead in a sequenced scenario (``run_scenario``'s
default ``downtime_s``)."""
SUPERVISED_POLL_S = 0.05
"""How often :func:`wait_supervised` reads the state file for the supervisor's restart."""


def server_named(stack: LocalStack, name: str) -> int | None:
    """Index in ``stack.servers`` of the server called ``name``, if it is one."""
    return next((i for i, s in enumerate(stack.servers) if s.name == name), None)


def inject(
    stack: LocalStack, spec: StackSpec, scenario: str, folder: Path, hosts: Fabric | None = None
) -> None:
    """Inject every fault of ``scenario`` (a sequenced one: its first; :func:`recover` the rest)."""
    if scenario in SEQUENCED:  # the first fault now, the rest in _recover_sequenced
        kind, target = faults_of(scenario)[0]
        _inject_one(stack, kind, target, scenario)
        return
    for kind, target in faults_of(scenario):
        _inject_one(stack, kind, target, scenario, hosts)


def _inject_one(
    stack: LocalStack, kind: str, target: str, scenario: str, hosts: Fabric | None = None
) -> None:
    named = server_named(stack, target)
    if kind == "partition":
        if hosts is None:
            raise ValueError(f"{scenario!r} needs the multi-host stack (--multihost)")
        hosts.partition(target)
    elif kind in ("kill", "failover", "crash") and named is not None:
        stack.servers[named].kill()  # ``crash``: the supervisor, not the bench, restarts it
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


def recover(
    stack: LocalStack, spec: StackSpec, scenario: str, folder: Path, hosts: Fabric | None = None
) -> None:
    """Undo the faults :func:`inject` injected (a sequenced scenario: run its later ones)."""
    if scenario in SEQUENCED:
        _recover_sequenced(stack, spec, scenario, folder)
        return
    for kind, target in faults_of(scenario):
        if kind == "partition" and hosts is not None:
            hosts.heal(target)
        else:
            _recover_one(stack, spec, kind, target, folder)


def _recover_sequenced(stack: LocalStack, spec: StackSpec, scenario: str, folder: Path) -> None:
    """Bring the first fault's server back empty, then inject and undo the second fault."""
    (_, server_name), (kind, target) = faults_of(scenario)
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


def _recover_one(stack: LocalStack, spec: StackSpec, kind: str, target: str, folder: Path) -> None:
    named = server_named(stack, target)
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


def wait_supervised(stack: LocalStack, scenario: str, timeout_s: float) -> None:
    """Wait until the stack's supervisor has started every server that ``scenario``
    crashed again and it listens on its port.

    Raises:
        RuntimeError: one was not back within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    for kind, target in faults_of(scenario):
        named = server_named(stack, target)
        if kind != "crash" or named is None:
            continue
        while load_state(stack.state_dir).restarts.get(target, 0) < 1:
            if time.monotonic() >= deadline:
                raise RuntimeError(f"the supervisor did not restart {target} in {timeout_s} s")
            time.sleep(SUPERVISED_POLL_S)
        server = stack.servers[named]
        wait_for_port(server.port, max(0.1, deadline - time.monotonic()), host=server.host)


def _refuse_writes(redis_url: str, *, refuse: bool) -> None:
    """Make Redis refuse every write (it requires a replica it does not have), or not."""
    client = SyncRedis.from_url(redis_url)
    try:
        client.config_set("min-replicas-to-write", 1 if refuse else 0)
    finally:
        client.close()
