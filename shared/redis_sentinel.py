"""Redis with failover: a primary, a replica and three Sentinels (``greenserve up
--redis-sentinel``).

The replica follows the primary by asynchronous replication; the Sentinels watch the
primary and, when a quorum (2 of 3) has not heard it for ``down_after_ms``, elect one of
themselves to promote the replica and tell the clients (who ask a Sentinel for the current
primary: ``shared.store.connect_redis`` with ``redis.sentinels``). A primary that comes back
is turned into a replica of the new one by the Sentinels.

Why Sentinel and not Redis Cluster: the scheduler's queues and the router's records are
moved together by Lua scripts and ``MULTI`` blocks over keys of one namespace; a cluster
would need every such key in one hash slot (one ``{namespace}`` tag), i.e. one shard per
stack, which is what Sentinel gives without the slot bookkeeping.

Nodes listen on the address given (``host``); a harness that spreads them over hosts starts
each with :func:`start_replica` and :func:`start_sentinel` at its own address.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis import Redis as SyncRedis
from redis.exceptions import RedisError

from shared.servers import ServerProcess, find_binary, free_ports, launch, start_redis

__all__ = [
    "DEFAULT_MASTER_NAME",
    "RedisFailoverSet",
    "master_address",
    "start_redis_failover",
    "start_replica",
    "start_sentinel",
    "wait_ready",
]

DEFAULT_MASTER_NAME = "greenserve"
QUORUM = 2
"""Sentinels that must agree the primary is down before a failover (of three)."""
DOWN_AFTER_MS = 1000
"""Silence after which a Sentinel holds the primary down: a second on one machine or a LAN;
a deployment across regions raises it above its round trips and GC pauses."""
FAILOVER_TIMEOUT_MS = 5000
READY_TIMEOUT_S = 30.0


def start_replica(
    workdir: Path,
    primary: ServerProcess,
    port: int | None = None,
    *,
    host: str = "127.0.0.1",
    name: str = "redis-replica",
    exec_prefix: Sequence[str] = (),
) -> ServerProcess:
    """A redis-server replicating ``primary`` (append-only file on, as the primary), run
    through ``exec_prefix`` (``shared.servers.launch``)."""
    return start_redis(
        workdir,
        port,
        host=host,
        name=name,
        extra_args=["--replicaof", primary.host, str(primary.port)],
        exec_prefix=exec_prefix,
    )


def start_sentinel(
    workdir: Path,
    primary: ServerProcess,
    port: int,
    *,
    host: str = "127.0.0.1",
    name: str = "sentinel-0",
    master_name: str = DEFAULT_MASTER_NAME,
    down_after_ms: int = DOWN_AFTER_MS,
    exec_prefix: Sequence[str] = (),
) -> ServerProcess:
    """A Sentinel watching ``primary`` as ``master_name``, run through ``exec_prefix``
    (``shared.servers.launch``); its config file (which Sentinel rewrites with what it
    learns) is ``workdir/sentinel.conf``."""
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "sentinel.conf"
    conf.write_text(
        "\n".join(
            [
                f"bind {host}",
                f"port {port}",
                f"dir {workdir}",
                f"logfile {workdir / 'sentinel.log'}",
                f"sentinel monitor {master_name} {primary.host} {primary.port} {QUORUM}",
                f"sentinel down-after-milliseconds {master_name} {down_after_ms}",
                f"sentinel failover-timeout {master_name} {FAILOVER_TIMEOUT_MS}",
                f"sentinel parallel-syncs {master_name} 1",
                "",
            ]
        )
    )
    args = [find_binary("redis-server"), str(conf), "--sentinel"]
    return launch(name, args, port, workdir, host=host, exec_prefix=exec_prefix)


@dataclass(slots=True)
class RedisFailoverSet:
    """The primary, replica and Sentinels of one stack."""

    primary: ServerProcess
    """The server started as primary (after a failover, a replica or gone)."""
    replica: ServerProcess
    sentinels: list[ServerProcess] = field(default_factory=list)
    master_name: str = DEFAULT_MASTER_NAME

    @property
    def servers(self) -> list[ServerProcess]:
        """Every process, primary first."""
        return [self.primary, self.replica, *self.sentinels]

    @property
    def sentinel_addresses(self) -> list[str]:
        """``host:port`` of each Sentinel: what ``redis.sentinels`` takes."""
        return [s.address for s in self.sentinels]

    def stop(self) -> None:
        """Stop the Sentinels first (so none fails over what is merely stopping)."""
        for server in [*self.sentinels, self.replica, self.primary]:
            server.stop()


def start_redis_failover(
    workdir: Path,
    *,
    host: str = "127.0.0.1",
    master_name: str = DEFAULT_MASTER_NAME,
    sentinels: int = 3,
    down_after_ms: int = DOWN_AFTER_MS,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> RedisFailoverSet:
    """Start a primary, a replica and ``sentinels`` Sentinels on ``host`` (stores in
    ``workdir/redis``, ``workdir/redis-replica``, ``workdir/sentinel-<i>``) and wait until
    the replica is in sync and every Sentinel knows the replica and the other Sentinels (a
    failover needs both).

    Raises:
        RuntimeError: a server did not start or the set was not ready in time (what
            started is stopped).
    """
    started: list[ServerProcess] = []
    try:
        primary = start_redis(workdir / "redis", host=host)
        started.append(primary)
        replica = start_replica(workdir / "redis-replica", primary, host=host)
        started.append(replica)
        watchers = []
        for i, port in enumerate(free_ports(sentinels)):
            watcher = start_sentinel(
                workdir / f"sentinel-{i}",
                primary,
                port,
                host=host,
                name=f"sentinel-{i}",
                master_name=master_name,
                down_after_ms=down_after_ms,
            )
            started.append(watcher)
            watchers.append(watcher)
        ready = RedisFailoverSet(primary, replica, watchers, master_name)
        wait_ready(ready, ready_timeout_s)
    except BaseException:
        for server in reversed(started):
            server.stop()
        raise
    return ready


def master_address(sentinel_addresses: list[str], master_name: str) -> str | None:
    """``host:port`` of the primary as the first Sentinel that answers names it."""
    for address in sentinel_addresses:
        host, _, port = address.rpartition(":")
        client = SyncRedis(host=host, port=int(port), socket_timeout=1.0)
        try:
            reply: Any = client.sentinel_get_master_addr_by_name(master_name)
        except RedisError:
            continue
        finally:
            client.close()
        if isinstance(reply, tuple | list) and len(reply) == 2:
            host = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
            return f"{host}:{reply[1]}"
    return None


def wait_ready(failover: RedisFailoverSet, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait until the replica is in sync and every Sentinel knows the replica and the
    other Sentinels (a failover needs both).

    Raises:
        RuntimeError: not so within ``timeout_s``, saying what was still awaited.
    """
    deadline = time.monotonic() + timeout_s
    others = len(failover.sentinels) - 1
    waiting_for = "the replica's sync"
    while time.monotonic() < deadline:
        if _replica_synced(failover.replica) and all(
            _sentinel_sees(s, failover.master_name, replicas=1, others=others)
            for s in failover.sentinels
        ):
            return
        waiting_for = "every Sentinel to know the replica and the other Sentinels"
        time.sleep(0.2)
    raise RuntimeError(f"Redis failover set not ready within {timeout_s:g} s: {waiting_for}")


def _replica_synced(replica: ServerProcess) -> bool:
    client = SyncRedis(host=replica.host, port=replica.port, socket_timeout=1.0)
    try:
        info = client.info("replication")
    except RedisError:
        return False
    finally:
        client.close()
    return bool(info.get("master_link_status") == "up")


def _sentinel_sees(
    sentinel: ServerProcess, master_name: str, *, replicas: int, others: int
) -> bool:
    client = SyncRedis(host=sentinel.host, port=sentinel.port, socket_timeout=1.0)
    try:
        state: Any = client.sentinel_master(master_name)
    except RedisError:
        return False
    finally:
        client.close()
    if not isinstance(state, dict):
        return False
    return (
        int(state.get("num-slaves", 0)) >= replicas
        and int(state.get("num-other-sentinels", 0)) >= others
    )
