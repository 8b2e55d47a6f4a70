"""The ``vllm`` worker backend against ``greenserve sim-engine``, inside a full stack."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, stack_launches
from loadgen.replay import replay
from loadgen.report import build_report
from loadgen.sim_server import SimEngineServer, start_sim_server
from loadgen.traces import load_azure_trace, resolve_trace
from proto.codec import decode
from proto.messages import ClockCommand, ClockReply, WorkerStats
from proto.subjects import Subjects
from shared.bus import connect_nats, request
from shared.clock import ModelClock
from shared.config import NatsSettings
from shared.engine import EngineConfig, SimulatedEngine, create_engine
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected

SPEEDUP = 20.0
REQUESTS = 80


@pytest.fixture
async def engine_url() -> AsyncIterator[tuple[str, SimulatedEngine]]:
    """A sim-engine on a free port, at the stack's speed-up."""
    engine = create_engine(EngineConfig(gpu="A100-80GB", model="llama-3-8b", max_num_seqs=64))
    runner, port = await start_sim_server(SimEngineServer(engine, speedup=SPEEDUP))
    try:
        yield f"http://127.0.0.1:{port}", engine
    finally:
        await runner.cleanup()


async def test_requests_through_the_vllm_backend_complete_with_exact_tokens_and_stats(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    engine_url: tuple[str, SimulatedEngine],
) -> None:
    """Test that a stack on a sim-engine completes every request exactly, with scraped stats."""
    url, engine = engine_url
    trace = load_azure_trace(resolve_trace("conv"), max_requests=REQUESTS)
    origin = time.time()
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=1,
        regions=("PJM",),
        speedup=SPEEDUP,
        origin_wall_s=origin,
        extra={
            "worker": {"backend": "vllm", "vllm_url": url, "stats_period_s": 0.2},
            # The stack's dvfs agent holds its fixed clock; make it the one this test sets,
            # and keep the scheduler's emergency max-clock override out of this clock test.
            "dvfs": {"mode": "fixed", "clock_mhz": 1005.0},
            "scheduler": {"ladder": False},
        },
    )
    subjects = Subjects(namespace)
    stats: list[WorkerStats] = []
    registered = asyncio.Event()

    async def on_stats(msg: Msg) -> None:
        stats.append(decode(msg.data, WorkerStats))
        registered.set()

    nc: Client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
    try:
        await nc.subscribe(subjects.worker_stats_wildcard, cb=on_stats)
        async with run_in_process(stack_launches(spec)):
            await asyncio.wait_for(registered.wait(), 10.0)
            clock = await request(
                nc,
                subjects.worker_clock("worker-0"),
                ClockCommand(worker_id="worker-0", clock_mhz=1001.0, issued_by="dvfs"),
                ClockReply,
                5.0,
            )
            result = await replay(nc, subjects, trace, model=spec.model, speedup=SPEEDUP)
    finally:
        await nc.close()

    report = build_report(result, ModelClock(SPEEDUP, origin, 1_656_633_600.0))
    assert report["completed"] == REQUESTS
    assert report["lost"] == 0
    assert report["failed"] == 0
    assert report["token_mismatch"] == 0
    for record in result.records:
        assert record.completion is not None
        assert record.completion.output_tokens == record.trace.output_tokens
        assert len(record.token_times) == record.trace.output_tokens
    assert clock.accepted
    assert clock.applied_mhz == engine.clock_mhz == 1005.0
    vllm_stats = [s for s in stats if s.backend == "vllm"]
    assert max(s.running for s in vllm_stats) > 0
    assert max(s.kv_blocks_used for s in vllm_stats) > 0
    assert {s.kv_blocks_total for s in vllm_stats} == {engine.kv_blocks_total}
    assert vllm_stats[-1].clock_mhz == 1005.0
    assert vllm_stats[-1].energy_j > 0
    assert sum(r.completion.energy_j for r in result.records if r.completion) > 0
