"""Durability: a worker stopped mid-replay drains or hands its requests back; none is lost."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from greenserve.local import start_local_stack
from greenserve.stack import StackSpec
from loadgen.replay import replay
from loadgen.traces import load_azure_trace, resolve_trace
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected

SPEEDUP = 10.0


async def test_stopping_a_worker_during_a_replay_loses_no_request(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str, tmp_path: Path
) -> None:
    """Test that SIGTERM on one of two workers still ends every request exactly once."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=120)
    spec = StackSpec(namespace=namespace, workers=2, regions=("PJM",), speedup=SPEEDUP)
    stack = await asyncio.to_thread(
        start_local_stack, spec, tmp_path, nats_url=nats_server.url, redis_url=redis_server.url
    )
    nc = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
    try:
        await asyncio.to_thread(stack.wait_ready)
        replaying = asyncio.create_task(
            replay(
                nc,
                Subjects(namespace),
                trace,
                model=spec.model,
                speedup=SPEEDUP,
                settle_timeout_s=20,
            )
        )
        await asyncio.sleep(trace[len(trace) // 2].t_s / SPEEDUP)
        worker = stack.group.procs["worker-0"]
        os.kill(worker.pid, signal.SIGTERM)
        result = await replaying
        exit_code = await asyncio.to_thread(worker.wait, 15)
    finally:
        await nc.close()
        await asyncio.to_thread(stack.stop)
    assert exit_code == 0
    missing = {r.request_id: r.error for r in result.records if r.completion is None}
    assert missing == {}
    assert sum(r.duplicate_endings for r in result.records) == 0
    for record in result.records:
        assert len(record.token_times) == record.trace.output_tokens
