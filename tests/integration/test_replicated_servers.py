"""Replicated servers: a 3-node NATS cluster (every JetStream resource R3) and Redis with a
replica and three Sentinels. A node or the primary is killed mid-replay; nothing is lost
or answered twice, and the stack keeps serving on what is left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from greenserve.faults import run_scenario
from loadgen.traces import load_azure_trace, resolve_trace
from shared.config import RedisSettings
from shared.redis_sentinel import master_address, start_redis_failover
from shared.store import connect_redis
from shared.store_marker import write_back_if_lost

pytestmark = pytest.mark.connected

STALL_BOUND_S = 15.0
"""Longest the request path may stall on a lost NATS node: JetStream elects a new leader
for each raft group the node led within its election timeout (4 to 9 s), and a delivery
the lost node swallowed comes again after ``ack_wait`` (5 s)."""

TOKEN_GAPS_BOUND = 3
"""Most requests with a missed token chunk after one node kill (1 in 1 of 6 runs on a loaded
2-core host; the streams in flight at the kill whose client was on the killed node)."""


@pytest.mark.parametrize("scenario", ["kill:nats-1", "kill:nats-leader"])
async def test_a_nats_node_killed_mid_replay_loses_and_duplicates_nothing(scenario: str) -> None:
    """Test that on a 3-node cluster with the ingress stream R3, SIGKILLing one node (a
    follower or the stream's leader) mid-replay loses no request and answers none twice,
    the two nodes left serve until it is back, and the stack ends consistent."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=150)
    outcome = await asyncio.to_thread(run_scenario, scenario, trace)
    assert outcome.stream_replicas == 3, outcome
    assert outcome.client_on_killed_node is not None, outcome
    # A client whose own server died misses what was published to it while it reconnected
    # (core NATS, at most once); once back it asks the workers for the endings of its
    # unanswered requests (shared/resends.py), so no request goes unanswered either way.
    assert outcome.lost == 0, outcome
    assert outcome.completed == len(trace), outcome
    assert outcome.failed == 0, outcome
    assert outcome.duplicated == 0, outcome
    # Tokens are core NATS (at most once): a client whose node was killed misses the chunks
    # published to it while it reconnects to another node. The completion's token count
    # shows the gap (docs/deploy.md, "What each fault costs"); only streams in flight at the
    # kill can have one.
    assert outcome.token_mismatch <= TOKEN_GAPS_BOUND, outcome
    assert outcome.leftover_records == 0, outcome
    # Counted from the kill: the node stays down ten seconds, so what completed first
    # after the fault was served without it.
    assert outcome.recovery_s is not None
    assert outcome.recovery_s < STALL_BOUND_S, outcome
    if scenario == "kill:nats-leader":
        assert outcome.killed_node in ("nats-0", "nats-1", "nats-2"), outcome


async def test_a_redis_primary_killed_mid_replay_fails_over_and_loses_nothing() -> None:
    """Test that SIGKILLing the Redis primary mid-replay makes the Sentinels promote the
    replica, the services follow it, and every request is answered exactly once with the
    stack consistent afterwards."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=150)
    outcome = await asyncio.to_thread(run_scenario, "failover:redis", trace)
    assert outcome.lost == 0, outcome
    assert outcome.duplicated == 0, outcome
    assert outcome.completed == len(trace), outcome
    assert outcome.token_mismatch == 0, outcome
    assert outcome.leftover_records == 0, outcome
    assert outcome.failover_s is not None
    assert outcome.failover_s < 10.0, outcome
    assert outcome.recovery_s is not None
    assert outcome.recovery_s < 10.0, outcome


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.1)


async def _role(port: int) -> str:
    client = Redis(port=port, socket_timeout=1.0)
    try:
        info = await client.info("replication")
    finally:
        await client.aclose()
    return str(info["role"])


async def test_the_shared_client_follows_a_failover_and_the_old_primary_rejoins(
    tmp_path: Path, namespace: str
) -> None:
    """Test that a client from ``connect_redis`` with Sentinels writes to the promoted
    replica after the primary is killed, reads what was replicated before, that an owner's
    marker check writes back once after the failover (the writes replication had not
    carried yet are what it repairs), and that the old primary, started again, becomes a
    replica of the new one."""
    servers = await asyncio.to_thread(start_redis_failover, tmp_path)
    settings = RedisSettings(
        url=servers.primary.url, sentinels=tuple(servers.sentinel_addresses), socket_timeout_s=1
    )
    client = connect_redis(settings)
    key = f"{namespace}:k"
    marker = f"{namespace}:marker:owner"
    write_backs: list[int] = []

    async def write_back() -> int:
        write_backs.append(1)
        return 1

    def check() -> Awaitable[int]:
        return write_back_if_lost(client, marker, write_back, follow_failover=True)

    try:
        assert await check() == 1  # no marker yet: written back once, marker set
        assert await check() == 0
        await client.set(key, b"before")
        await client.wait(1, 1000)  # replicated before the kill: a failover keeps it
        servers.primary.kill()

        async def written() -> bool:
            try:
                await client.set(f"{key}:after", b"after")
            except RedisError:  # unreachable, or a replica's READONLY, until promoted
                return False
            return True

        await _until(written, timeout_s=20.0)
        assert master_address(servers.sentinel_addresses, servers.master_name) == (
            servers.replica.address
        )
        assert await client.get(key) == b"before"
        assert await check() == 1  # the promoted replica has the marker of the old primary
        assert await check() == 0
        assert len(write_backs) == 2
        servers.primary = await asyncio.to_thread(servers.primary.restart)

        async def demoted() -> bool:
            return await _role(servers.primary.port) == "slave"

        await _until(demoted, timeout_s=20.0)
    finally:
        await client.aclose()
        await asyncio.to_thread(servers.stop)
