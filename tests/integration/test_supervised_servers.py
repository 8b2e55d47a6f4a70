"""``greenserve up``'s supervisor brings back the servers ``up`` started, with their state.

Before: the supervisor restarted services only; a local stack whose nats-server or
redis-server was killed stayed without it until an operator ran ``up`` again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import time
from datetime import datetime
from pathlib import Path

import pytest

from greenserve.commands._status_report import report_status
from greenserve.local import LocalStack, StackState, load_state, start_local_stack, stop_state
from greenserve.local.processes import alive
from greenserve.local.supervisor import SupervisorSettings
from greenserve.stack import StackSpec
from loadgen.replay import replay
from loadgen.traces import load_azure_trace, resolve_trace
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.servers import wait_for_port

pytestmark = [pytest.mark.connected, pytest.mark.timeout(300)]

SPEEDUP = 20.0
SUPERVISION = SupervisorSettings(poll_s=0.1, first_backoff_s=0.2)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _restarted(state_dir: Path, name: str, count: int, timeout_s: float = 20.0) -> StackState:
    """The state file once the supervisor has restarted ``name`` ``count`` times."""
    deadline = time.monotonic() + timeout_s
    while (state := load_state(state_dir)).restarts.get(name, 0) < count:
        assert time.monotonic() < deadline, f"{name} was not restarted"
        time.sleep(0.1)
    return state


async def _ingress(state: StackState) -> tuple[datetime | None, int]:
    """When the ingress stream was created, and its last sequence number."""
    nc = await connect_nats(NatsSettings(url=state.nats_url), "test-client")
    try:
        info = await nc.jetstream().stream_info(Subjects(state.namespace).ingress_stream)
        return info.created, info.state.last_seq
    finally:
        await nc.close()


async def _replay(state: StackState, requests: int) -> tuple[int, int]:
    """Replay ``requests`` conversation requests; return (completed, unanswered)."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=requests)
    nc = await connect_nats(NatsSettings(url=state.nats_url), "test-client")
    try:
        result = await replay(
            nc, Subjects(state.namespace), trace, model=state.model, speedup=SPEEDUP
        )
    finally:
        await nc.close()
    completed = sum(1 for r in result.records if r.completion is not None)
    return completed, requests - completed


async def _redis_get(state: StackState, key: str) -> bytes | str | None:
    redis = state.redis_client(read_timeout_s=2.0)
    try:
        value: bytes | str | None = await redis.get(key)
        return value
    finally:
        await redis.aclose()


async def _redis_set(state: StackState, key: str, value: str) -> None:
    redis = state.redis_client(read_timeout_s=2.0)
    try:
        await redis.set(key, value)
    finally:
        await redis.aclose()


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def test_killed_servers_come_back_with_their_state_and_down_restarts_nothing(
    tmp_path: Path, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test that SIGKILL of the nats-server and then the redis-server of a supervised stack
    brings each back on its port, the ingress stream the same one (its store kept) and a
    Redis key written before the kill readable after it (append-only file kept), counted in
    ``greenserve status``; that requests complete afterwards; and that ``down`` leaves
    nothing running for the supervisor to restart."""
    spec = StackSpec(
        namespace=namespace,
        workers=1,
        regions=("PJM",),
        speedup=SPEEDUP,
        extra={"shutdown_timeout_s": 1.0},
    )
    stack: LocalStack = start_local_stack(spec, tmp_path, supervise=SUPERVISION)
    try:
        stack.wait_ready(timeout_s=120.0)
        state = stack.state
        assert set(state.server_commands) == {"nats", "redis"}
        assert asyncio.run(_replay(state, 5)) == (5, 0)
        created, last_seq = asyncio.run(_ingress(state))
        assert last_seq >= 5

        os.kill(state.server_pids["nats"], signal.SIGKILL)
        state = _restarted(tmp_path, "nats", 1)
        wait_for_port(_port(state.nats_url))
        # A stream created again (the services would do that) has a new creation time and
        # starts over from sequence 0: the same one means the store came back.
        assert asyncio.run(_ingress(state)) == (created, last_seq)

        key = f"{namespace}:probe"
        asyncio.run(_redis_set(state, key, "kept"))
        os.kill(state.server_pids["redis"], signal.SIGKILL)
        state = _restarted(tmp_path, "redis", 1)
        wait_for_port(_port(state.redis_url))
        assert asyncio.run(_redis_get(state, key)) == b"kept"

        assert asyncio.run(_replay(state, 10)) == (10, 0)
        capsys.readouterr()
        assert report_status(argparse.Namespace(state_dir=tmp_path, json=True)) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["restarts"]["nats"] == 1
        assert report["restarts"]["redis"] == 1
        assert report["processes"]["nats"] is True
        assert report["processes"]["redis"] is True

        recorded = {**state.pids, **state.server_pids}
        assert "nats" in stop_state(tmp_path, timeout_s=5.0)
        # Longer than a poll and a backoff: a supervisor still watching would have
        # started something again by now.
        time.sleep(SUPERVISION.poll_s + SUPERVISION.first_backoff_s + 1.0)
        assert not (tmp_path / "stack.json").exists()
        assert [name for name, pid in recorded.items() if alive(pid, state)] == []
        assert not _listening(_port(state.nats_url))
        assert not _listening(_port(state.redis_url))
        log = (tmp_path / "logs" / "supervisor.log").read_text()
        assert log.count("restarted ") == 2  # nats and redis, nothing after ``down``
    finally:
        stack.stop(timeout_s=5.0)
