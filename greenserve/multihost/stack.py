"""A whole stack spread over the hosts of a :class:`~greenserve.multihost.fabric.Fabric`.

The three NATS nodes, the Redis primary, its replica and three Sentinels, and every
service process each run on one host (``ip netns exec``) and listen on that host's
address; clients reach the servers by those addresses only. :data:`SERVICE_HOSTS` places
the control services so that no host holds the whole request path and every host holds a
NATS node, a Sentinel and (with two workers) something that serves: partitioning any one
host costs the stack a piece of each layer. The result is an ordinary
:class:`~greenserve.local.LocalStack`, so the fault bench and the control-plane bench drive
it as they drive a stack on one host.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from greenserve.local import LocalStack
from greenserve.local.metrics_targets import metrics_urls
from greenserve.local.startup import FORECASTER_CACHE_ENV, forecaster_cache
from greenserve.local.state import StackState
from greenserve.multihost.fabric import Fabric, Host
from greenserve.runner import ProcessGroup, start_process
from greenserve.stack import ServiceLaunch, StackSpec, stack_launches, with_settings
from shared.nats_cluster import NatsNode, replicas_for, start_node, wait_jetstream_ready
from shared.redis_sentinel import (
    DEFAULT_MASTER_NAME,
    RedisFailoverSet,
    start_replica,
    start_sentinel,
    wait_ready,
)
from shared.servers import ServerProcess, start_redis

__all__ = [
    "NATS_PORTS",
    "SERVICE_HOSTS",
    "host_of",
    "local_first",
    "multihost_launches",
    "start_multihost_stack",
]

NATS_PORTS = (4222, 6222, 8222)
"""Client, route and monitoring port of every node: each host has its own address, so
every node takes the usual ports, as on real machines."""
REDIS_PORT = 6379
SENTINEL_PORT = 26379
GATEWAY_PORT = 8080
METRICS_PORT = 9464
PING_INTERVAL_S = 1.0
"""``nats.ping_interval_s`` of every service on the hosts: a node silent for about three
of these (``nats.max_outstanding_pings`` 2) is left for another."""
SERVICE_HOSTS = {
    "scheduler": 0,
    "router": 0,
    "requestpath": 0,
    "classifier": 1,
    "forecaster": 1,
    "planner": 2,
    "gateway": 2,
}
"""Host index of each control service (modulo the host count). The request path's
scheduler and router share host 0 with the Redis primary they write to; the classifier
sits apart; workers and dvfs agents follow (:func:`host_of`)."""


def host_of(name: str, hosts: int) -> int:
    """Index of the host a process runs on: :data:`SERVICE_HOSTS` for the control
    services, worker ``i`` on host ``i + 1``, a classifier replica ``classifier-<k>`` on
    host ``k``, anything else (dvfs agents) on the last host."""
    if name in SERVICE_HOSTS:
        return SERVICE_HOSTS[name] % hosts
    kind, _, index = name.rpartition("-")
    if kind == "worker" and index.isdigit():
        return (int(index) + 1) % hosts
    if kind == "classifier" and index.isdigit():
        return int(index) % hosts
    return hosts - 1


def multihost_launches(
    spec: StackSpec, hosts: Sequence[Host], classifiers: int = 1
) -> list[tuple[ServiceLaunch, Host]]:
    """Every process of ``spec`` with the host it runs on, listening there (metrics, the
    gateway) on the usual ports; ``classifiers`` > 1 adds replicas ``classifier-2`` … of
    the classifier, which share the ingress consumer's deliver group (a queue group)."""
    if classifiers < 1:
        raise ValueError(f"a stack needs at least one classifier, not {classifiers}")
    if classifiers > 1 and spec.colocate_request_path:
        raise ValueError("classifier replicas need the separate request path")
    launches = stack_launches(spec)
    base = next((x for x in launches if x.name == "classifier"), None)
    if base is not None:
        at = launches.index(base) + 1
        extra = [
            dataclasses.replace(base, name=f"classifier-{k}") for k in range(2, classifiers + 1)
        ]
        launches[at:at] = extra
    placed = [(launch, hosts[host_of(launch.name, len(hosts))]) for launch in launches]
    overrides: dict[str, dict[str, Any]] = {
        launch.name: {
            "telemetry": {"metrics_host": host.address, "metrics_port": METRICS_PORT + i},
            "gateway": {"host": host.address, "port": GATEWAY_PORT},
            "nats": {"url": local_first(spec.nats_url, host.address), "prefer_first": True},
        }
        for i, (launch, host) in enumerate(placed)
    }
    named = {x.name: x for x in with_settings([x for x, _ in placed], overrides)}
    return [(named[launch.name], host) for launch, host in placed]


def local_first(nats_url: str, address: str) -> str:
    """``nats_url``'s servers with the one at ``address`` (the service's own host) first.

    nats-py shuffles its server list by default, so a service landed on another host's
    node about two times in three, and a message between two services on one host crossed
    hosts twice: with the hosts 40-65 ms apart, local first took the request path's added
    p50 from 418 to 235 ms (docs/deploy.md, Multi-host on one machine)."""
    servers = [s.strip() for s in nats_url.split(",")]
    own = [s for s in servers if urlsplit(s).hostname == address]
    return ",".join(own + [s for s in servers if s not in own])


def _start_nats(fabric: Fabric, workdir: Path) -> list[ServerProcess]:
    client, route, monitor = NATS_PORTS
    nodes = [
        NatsNode(f"nats-{i}", host.address, client, route, monitor)
        for i, host in enumerate(fabric.hosts[:3])
    ]
    started: list[ServerProcess] = []
    try:
        for node, host in zip(nodes, fabric.hosts, strict=False):
            started.append(
                start_node(node, nodes, workdir / node.name, exec_prefix=host.exec_prefix)
            )
        wait_jetstream_ready(nodes)
    except BaseException:
        for server in started:
            server.stop()
        raise
    return started


def _start_redis(fabric: Fabric, workdir: Path) -> RedisFailoverSet:
    hosts = fabric.hosts
    started: list[ServerProcess] = []
    try:
        primary = start_redis(
            workdir / "redis",
            REDIS_PORT,
            host=hosts[0].address,
            exec_prefix=hosts[0].exec_prefix,
        )
        started.append(primary)
        second = hosts[1 % len(hosts)]
        replica = start_replica(
            workdir / "redis-replica",
            primary,
            REDIS_PORT,
            host=second.address,
            exec_prefix=second.exec_prefix,
        )
        started.append(replica)
        sentinels = []
        for i in range(3):
            host = hosts[i % len(hosts)]
            sentinel = start_sentinel(
                workdir / f"sentinel-{i}",
                primary,
                SENTINEL_PORT + i // len(hosts),
                host=host.address,
                name=f"sentinel-{i}",
                exec_prefix=host.exec_prefix,
            )
            started.append(sentinel)
            sentinels.append(sentinel)
        failover = RedisFailoverSet(primary, replica, sentinels, DEFAULT_MASTER_NAME)
        wait_ready(failover)
    except BaseException:
        for server in reversed(started):
            server.stop()
        raise
    return failover


def start_multihost_stack(
    spec: StackSpec, fabric: Fabric, folder: Path, *, classifiers: int = 1
) -> LocalStack:
    """Start the servers and every service of ``spec`` over ``fabric``'s hosts (at least
    two; the NATS nodes on the first three), with everything's files under ``folder``.

    Raises:
        ValueError: fewer than two hosts, or a replica count the request path cannot take.
        RuntimeError: a server or service did not start (what started is stopped).
    """
    if len(fabric.hosts) < 2:
        raise ValueError("a multi-host stack needs at least two hosts")
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    servers: list[ServerProcess] = []
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        shutil.rmtree(folder / "nats", ignore_errors=True)
        shutil.rmtree(folder / "redis", ignore_errors=True)
        servers += _start_nats(fabric, folder / "nats")
        redis = _start_redis(fabric, folder / "redis")
        servers += redis.servers
        nats_url = ",".join(s.url for s in servers if s.name.startswith("nats-"))
        origin = time.time()
        extra = dict(spec.extra)
        forecaster = dict(extra.get("forecaster", {}))
        if not os.environ.get(FORECASTER_CACHE_ENV):
            forecaster.setdefault("model_cache_dir", str(forecaster_cache(folder)))
        extra["forecaster"] = forecaster
        # A node on a host cut off goes silent without closing its connections: pings are
        # how a service notices and moves to another node (nats-py's default waits minutes).
        extra["nats"] = {"ping_interval_s": PING_INTERVAL_S, **extra.get("nats", {})}
        spec = dataclasses.replace(
            spec,
            extra=extra,
            nats_url=nats_url,
            nats_replicas=replicas_for(min(3, len(fabric.hosts))),
            redis_url=redis.primary.url,
            redis_sentinels=tuple(redis.sentinel_addresses),
            redis_master_name=redis.master_name,
            origin_wall_s=origin,
            gateway_port=GATEWAY_PORT,
        )
        placed = multihost_launches(spec, fabric.hosts, classifiers)
        for launch, host in placed:
            procs[launch.name] = start_process(launch, folder, host.exec_prefix)
    except BaseException:
        ProcessGroup(procs).stop(timeout_s=5.0)
        for server in reversed(servers):
            server.stop()
        raise
    launches = [launch for launch, _ in placed]
    gateway_host = next(host for launch, host in placed if launch.name == "gateway")
    state = StackState(
        namespace=spec.namespace,
        nats_url=nats_url,
        redis_url=redis.primary.url,
        nats_replicas=spec.nats_replicas,
        redis_sentinels=list(redis.sentinel_addresses),
        redis_master_name=redis.master_name,
        speedup=spec.speedup,
        origin_wall_s=origin,
        model=spec.model,
        models=list(spec.models),
        workers=spec.workers,
        pids={name: proc.pid for name, proc in procs.items()},
        server_pids={s.name: s.proc.pid for s in servers},
        gateway_url=f"http://{gateway_host.address}:{GATEWAY_PORT}",
        modules={launch.name: launch.module for launch in launches},
        metrics=metrics_urls(launches),
    )
    return LocalStack(state, folder, ProcessGroup(procs), servers)
