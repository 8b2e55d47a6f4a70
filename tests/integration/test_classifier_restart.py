"""Durability: killing the classifier mid-replay loses no request (JetStream redelivers)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from pathlib import Path

import pytest

from greenserve.local import start_local_stack
from greenserve.runner import start_process
from greenserve.stack import StackSpec, stack_launches
from loadgen.replay import replay
from loadgen.traces import load_azure_trace, resolve_trace
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected

SPEEDUP = 10.0


async def test_killing_the_classifier_during_a_replay_loses_no_request(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str, tmp_path: Path
) -> None:
    """Test that kill -9 of the classifier, then a restart, still completes every request once."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=150)
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
        # A third of the way through the trace (wall time), kill -9 and restart the classifier.
        await asyncio.sleep(trace[len(trace) // 3].t_s / SPEEDUP)
        classifier = stack.group.procs["classifier"]
        os.kill(classifier.pid, signal.SIGKILL)
        classifier.wait()
        await asyncio.sleep(1.0)  # requests pile up in the stream while it is down
        full = dataclasses.replace(
            spec,
            nats_url=nats_server.url,
            redis_url=redis_server.url,
            origin_wall_s=stack.state.origin_wall_s,
        )
        launch = next(x for x in stack_launches(full) if x.name == "classifier")
        stack.group.procs["classifier"] = start_process(launch, tmp_path)
        result = await replaying
    finally:
        await nc.close()
        await asyncio.to_thread(stack.stop)
    completed = [r for r in result.records if r.completion is not None]
    assert len(completed) == len(trace), {
        r.request_id: r.error for r in result.records if not r.completion
    }
    assert sum(r.duplicate_endings for r in result.records) == 0
    for record in completed:
        assert len(record.token_times) == record.trace.output_tokens
