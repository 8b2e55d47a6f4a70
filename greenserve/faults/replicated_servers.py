"""Probes of a scenario on replicated servers: a NATS cluster, Redis with Sentinels.

Which node leads the ingress stream (``kill:nats-leader`` kills it), how many replicas the
stream has, when the Sentinels promoted a replica, and whether the replaying client was
connected to the node killed: its subscriptions move to another node on reconnect, and
what was published to it meanwhile (core NATS, at most once) does not reach it, so the
tests allow lost endings only then.
"""

from __future__ import annotations

import time

from nats.aio.client import Client

from greenserve.faults.injection import server_named
from greenserve.faults.scenario_names import faults_of
from greenserve.local import LocalStack
from proto.subjects import Subjects
from shared.redis_sentinel import master_address

__all__ = [
    "NODE_DOWN_S",
    "PROMOTED_WITHIN_S",
    "client_on_killed_node",
    "ingress_layout",
    "stream_leader",
    "wait_promoted",
]

NODE_DOWN_S = 10.0
"""Wall seconds a killed cluster node stays down: long enough that the requests of the
replay's middle third are served by the two nodes left, not by the node come back."""
PROMOTED_WITHIN_S = 30.0
"""How long ``failover:redis`` waits for the Sentinels to name a new primary."""


def client_on_killed_node(stack: LocalStack, nc: Client | None, scenario: str) -> bool | None:
    """Whether ``nc`` is connected to a NATS node the scenario kills (``None``: kills none)."""
    ports = [
        stack.servers[index].port
        for kind, target in faults_of(scenario)
        if kind == "kill" and target.startswith("nats-")
        and (index := server_named(stack, target)) is not None
    ]  # fmt: skip
    if not ports:
        return None
    url = nc.connected_url if nc is not None else None
    return url is not None and url.port in ports


async def stream_leader(nc: Client, namespace: str) -> str:
    """The NATS node that leads the ingress stream now."""
    info = await nc.jetstream().stream_info(Subjects(namespace).ingress_stream)
    if info.cluster is None or not info.cluster.leader:
        raise RuntimeError("the ingress stream has no cluster leader (not a cluster?)")
    return info.cluster.leader


async def ingress_layout(nc: Client, namespace: str) -> tuple[int, dict[str, str]]:
    """The ingress stream's configured replicas, and the node leading it (``stream``) and
    each of its consumers (one stream read, the consumers' list)."""
    js = nc.jetstream()
    name = Subjects(namespace).ingress_stream
    info = await js.stream_info(name)
    leaders = {"stream": (info.cluster.leader or "") if info.cluster is not None else ""}
    for consumer in await js.consumers_info(name):
        cluster = consumer.cluster
        leaders[consumer.name or "?"] = (cluster.leader or "") if cluster is not None else ""
    return int(info.config.num_replicas or 1), leaders


def wait_promoted(stack: LocalStack, old_primary: str, within_s: float) -> None:
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
