"""The NATS and Redis servers a local stack runs on: started for it, or given by URL.

A secured stack (``--secure``) starts both servers with per-service users and
permissions (``shared.security.local_servers``); otherwise each server is started unless
its URL is given: NATS as one server or a cluster of N (``--nats-cluster``), Redis as one
server or a primary, a replica and three Sentinels (``--redis-sentinel``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from greenserve.stack import CLOCK_AGENT_MODULE, StackSpec, identity_for, stack_launches
from shared.nats_cluster import start_nats_cluster
from shared.redis_sentinel import DEFAULT_MASTER_NAME, start_redis_failover
from shared.security.local_servers import SecureServers, start_secure_servers
from shared.servers import ServerProcess, start_nats, start_redis

__all__ = ["StackServers", "start_servers"]


@dataclass(slots=True)
class StackServers:
    """The servers of one stack: their URLs and the ones started for it."""

    nats_url: str
    """What the stack's services connect to."""
    redis_url: str
    started: list[ServerProcess] = field(default_factory=list)
    """The servers started for this stack (none where both URLs were given); it owns them."""
    secured: SecureServers | None = None
    """Users, permissions (and CA) of a ``--secure`` stack's servers."""
    nats_replicas: int = 1
    """Replicas of each JetStream resource: min(3, nodes) on a cluster started here."""
    redis_sentinels: tuple[str, ...] = ()
    """``host:port`` of the Sentinels started here (empty: one Redis, no failover)."""
    redis_master_name: str = DEFAULT_MASTER_NAME

    @property
    def tool_nats_url(self) -> str:
        """What the tools (``replay``) connect to: a secured stack's loadgen identity."""
        return self.secured.tool_nats_url if self.secured else self.nats_url

    @property
    def tool_redis_url(self) -> str:
        """What the tools (``status``) connect to: a secured stack's monitor identity."""
        return self.secured.tool_redis_url if self.secured else self.redis_url

    def stop(self) -> None:
        """Stop the servers started for this stack (Sentinels before the Redis they watch)."""
        for server in reversed(self.started):
            server.stop()


def start_servers(
    spec: StackSpec,
    state_dir: Path,
    *,
    nats_url: str | None = None,
    redis_url: str | None = None,
    secure: bool = False,
    tls: bool = False,
    nats_cluster: int = 1,
    redis_sentinel: bool = False,
) -> StackServers:
    """Start the servers ``spec``'s processes need (each one unless its URL is given) in
    ``state_dir``; those started so far are stopped again if one fails to start.

    ``secure`` starts both, with an identity for each process of ``spec`` and, with
    ``tls``, certificates of a local CA; it takes no URLs (the caller checks).
    ``nats_cluster`` > 1 starts that many NATS nodes (``nats-0`` …) with routes;
    ``redis_sentinel`` a Redis primary (``redis``), replica and Sentinels. Neither takes a
    URL nor ``secure`` (the caller checks).
    """
    started: list[ServerProcess] = []
    secured: SecureServers | None = None
    replicas = 1
    sentinels: tuple[str, ...] = ()
    try:
        if secure:
            identities = [
                identity_for(launch)
                for launch in stack_launches(spec)
                if launch.module != CLOCK_AGENT_MODULE  # no bus, so no bus identity
            ]
            secured = start_secure_servers(identities, spec.namespace, state_dir, tls=tls)
            started += secured.servers
            nats_url, redis_url = secured.servers[0].url, secured.servers[1].url
        if nats_url is None:
            # A stack we start owns its server: begin with an empty JetStream store, so no
            # request of an earlier run is redelivered to a client that is long gone.
            shutil.rmtree(state_dir / "nats", ignore_errors=True)
            if nats_cluster > 1:
                cluster = start_nats_cluster(state_dir / "nats", nats_cluster)
                started += cluster.servers
                nats_url, replicas = cluster.url, cluster.replicas
            else:
                started.append(start_nats(state_dir / "nats"))
                nats_url = started[-1].url
        if redis_url is None:
            # Likewise an empty Redis: its append-only file would bring back an earlier
            # run's queues (``start_redis`` keeps one so that a restart in a run does).
            shutil.rmtree(state_dir / "redis", ignore_errors=True)
            if redis_sentinel:
                failover = start_redis_failover(state_dir / "redis")
                started += failover.servers
                redis_url = failover.primary.url
                sentinels = tuple(failover.sentinel_addresses)
            else:
                started.append(start_redis(state_dir / "redis"))
                redis_url = started[-1].url
    except BaseException:
        for server in reversed(started):  # Sentinels before the Redis they watch
            server.stop()
        raise
    return StackServers(
        nats_url,
        redis_url,
        started,
        secured,
        nats_replicas=replicas,
        redis_sentinels=sentinels,
    )
