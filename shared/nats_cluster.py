"""A NATS cluster of N JetStream servers joined by routes (``greenserve up --nats-cluster``).

Each node is a :class:`NatsNode`: a server name, the address it listens on, its client,
route and monitoring ports. :func:`plan_nodes` picks free ports on one address; a harness
that runs nodes on other hosts builds the nodes itself and hands them to
:func:`start_nats_cluster`. Every node keeps its own JetStream store under
``<workdir>/<name>`` and routes to every other node; JetStream places an R3 stream on
three of them, so a stream outlives any one node.

The cluster is returned once JetStream has a meta leader (each node's ``/healthz``
answers ok): before that a stream cannot be created, and the services' start-up would
spend its retries on a cluster still electing.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shared.servers import ServerProcess, free_ports, start_nats

__all__ = [
    "CLUSTER_NAME",
    "MAX_REPLICAS",
    "NatsCluster",
    "NatsNode",
    "plan_nodes",
    "replicas_for",
    "start_nats_cluster",
]

CLUSTER_NAME = "greenserve"
MAX_REPLICAS = 3
"""Replicas of each JetStream resource at most: three survive one lost node with a quorum
left to accept writes; five would cost two more copies of every message for a second."""
READY_TIMEOUT_S = 30.0


def replicas_for(cluster_size: int) -> int:
    """``nats.replicas`` for a cluster of ``cluster_size`` nodes: min(3, size)."""
    if cluster_size < 1:
        raise ValueError(f"a NATS cluster has at least one node, not {cluster_size}")
    return min(MAX_REPLICAS, cluster_size)


@dataclass(frozen=True, slots=True)
class NatsNode:
    """Where one node of the cluster listens."""

    name: str
    """Server name, unique in the cluster (JetStream places replicas by it)."""
    host: str
    client_port: int
    route_port: int
    monitor_port: int

    @property
    def route_url(self) -> str:
        """What the other nodes dial to join this one."""
        return f"nats://{self.host}:{self.route_port}"


def plan_nodes(size: int, host: str = "127.0.0.1", prefix: str = "nats") -> list[NatsNode]:
    """``size`` nodes named ``<prefix>-0`` …, each with three free ports on ``host``."""
    if size < 1:
        raise ValueError(f"a NATS cluster has at least one node, not {size}")
    ports = free_ports(3 * size)
    return [
        NatsNode(f"{prefix}-{i}", host, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2])
        for i in range(size)
    ]


@dataclass(slots=True)
class NatsCluster:
    """The started nodes (in :attr:`nodes` order) of one cluster."""

    nodes: list[NatsNode]
    servers: list[ServerProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated: what ``nats.url`` takes."""
        return ",".join(f"nats://{n.host}:{n.client_port}" for n in self.nodes)

    @property
    def replicas(self) -> int:
        """Replicas of each JetStream resource on this cluster."""
        return replicas_for(len(self.nodes))

    def stop(self) -> None:
        """Stop every node."""
        for server in self.servers:
            server.stop()


def start_node(
    node: NatsNode,
    peers: Sequence[NatsNode],
    workdir: Path,
    *,
    exec_prefix: Sequence[str] = (),
) -> ServerProcess:
    """Start ``node``, routed to ``peers`` (itself among them is ignored), its store under
    ``workdir``, run through ``exec_prefix`` (``shared.servers.launch``); it returns once it
    takes clients, not once JetStream is ready."""
    routes = ",".join(p.route_url for p in peers if p.name != node.name)
    args = [
        "-n",
        node.name,
        "--cluster_name",
        CLUSTER_NAME,
        "--cluster",
        f"nats://{node.host}:{node.route_port}",
        "-m",
        str(node.monitor_port),
    ]
    if routes:
        args += ["--routes", routes]
    return start_nats(
        workdir,
        node.client_port,
        host=node.host,
        name=node.name,
        extra_args=args,
        exec_prefix=exec_prefix,
    )


def start_nats_cluster(
    workdir: Path,
    size: int = 3,
    *,
    nodes: Sequence[NatsNode] | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> NatsCluster:
    """Start a cluster of ``size`` nodes on 127.0.0.1 (or the given ``nodes``), each node's
    store in ``workdir/<name>``, and wait until JetStream is ready on every node.

    Raises:
        RuntimeError: a node did not start, or JetStream was not ready within
            ``ready_timeout_s`` (the nodes started are stopped).
    """
    chosen = list(nodes) if nodes is not None else plan_nodes(size)
    cluster = NatsCluster(chosen)
    try:
        for node in chosen:
            cluster.servers.append(start_node(node, chosen, workdir / node.name))
        wait_jetstream_ready(chosen, ready_timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def wait_jetstream_ready(nodes: Sequence[NatsNode], timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait until every node's ``/healthz`` says ok (JetStream has a meta leader and the
    node is current with it).

    Raises:
        RuntimeError: some node was not ready within ``timeout_s``, with what it said.
    """
    deadline = time.monotonic() + timeout_s
    pending = list(nodes)
    said: dict[str, str] = {}
    while pending:
        node = pending[0]
        status, text = _healthz(node)
        if status == "ok":
            pending.pop(0)
            continue
        said[node.name] = text
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"JetStream not ready within {timeout_s:g} s on {node.name}: {said[node.name]}"
            )
        time.sleep(0.2)


def _healthz(node: NatsNode) -> tuple[str, str]:
    url = f"http://{node.host}:{node.monitor_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            body = response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
    except OSError as exc:
        return "down", str(exc)
    status = "?"
    with contextlib.suppress(ValueError, AttributeError):
        status = str(json.loads(body).get("status", "?"))
    return status, body.strip()
