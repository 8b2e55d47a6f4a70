"""End-to-end: trace requests through all seven services over real NATS and Redis."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, stack_launches
from loadgen.replay import ReplayResult, replay
from loadgen.report import build_report
from loadgen.traces import TraceRequest, load_azure_trace, resolve_trace
from proto.codec import decode
from proto.messages import InstanceState, WorkerStats
from proto.subjects import Subjects
from services.dvfs.service import simulator_models
from shared.bus import connect_nats
from shared.clock import ModelClock
from shared.config import NatsSettings
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected

SPEEDUP = 20.0


async def test_conversation_trace_completes_through_all_services(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that 300 conversation-trace requests all complete with exact token counts, none lost."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=300)
    origin = time.time()
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=3,
        regions=("PJM", "CISO"),
        speedup=SPEEDUP,
        origin_wall_s=origin,
    )
    nc: Client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
    try:
        async with run_in_process(stack_launches(spec)):
            result = await replay(nc, Subjects(namespace), trace, model=spec.model, speedup=SPEEDUP)
    finally:
        await nc.close()
    report = build_report(result, ModelClock(SPEEDUP, origin, 1_656_633_600.0))
    assert report["lost"] == 0
    assert report["failed"] == 0
    assert report["completed"] == 300
    assert report["duplicated"] == 0
    assert report["token_mismatch"] == 0
    for record in result.records:
        done = record.completion
        assert done is not None
        assert done.first_token_at <= done.finished_at
        assert done.output_tokens == record.trace.output_tokens
    assert report["energy_wh"] is not None
    assert report["energy_wh"] > 0


async def test_miad_lowers_worker_clocks_in_the_live_stack(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that with dvfs mode miad the light conv load runs below max clock and completes."""
    # MIAD judges end-to-end latencies, control plane included; at a high speed-up its wall
    # overhead (x K in model time) alone would exceed Table 7's TTFT bound, so keep K low.
    speedup = 5.0
    trace = load_azure_trace(resolve_trace("conv"), max_requests=80)
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=2,
        regions=("PJM",),
        speedup=speedup,
        origin_wall_s=time.time(),
        # A pool sent long prompts stays at the maximum clock until its node has served
        # enough of them to know their p99 (services/dvfs/slo_miad.served_floor_mhz): 80
        # requests over two workers are fewer than the default sample's 300.
        extra={"dvfs": {"mode": "miad"}, "planner": {"observed_min_requests": 20}},
    )
    nc: Client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
    clocks: list[float] = []

    async def on_stats(msg: Msg) -> None:
        clocks.append(decode(msg.data, WorkerStats).clock_mhz)

    try:
        await nc.subscribe(Subjects(namespace).worker_stats_wildcard, cb=on_stats)
        async with run_in_process(stack_launches(spec)):
            result = await replay(nc, Subjects(namespace), trace, model=spec.model, speedup=speedup)
    finally:
        await nc.close()
    assert all(r.completion is not None for r in result.records)
    assert max(clocks) == pytest.approx(1410.0)
    assert min(clocks) < 1000.0


@dataclass(slots=True)
class ClockedReplay:
    """A replay on one sim worker under a dvfs mode, with what the worker reported."""

    result: ReplayResult
    started: float
    """Wall time the replay began."""
    clocks: list[tuple[float, float]]
    """(wall time, MHz) of every stats heartbeat."""
    states: list[InstanceState]
    """Every InstanceState published (predictive mode only)."""


async def _replay_on_one_worker(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    trace: list[TraceRequest],
    *,
    speedup: float,
    dvfs: dict[str, object],
) -> ClockedReplay:
    """Replay ``trace`` through a one-worker (PJM) in-process stack with these dvfs settings."""
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=1,
        regions=("PJM",),
        speedup=speedup,
        origin_wall_s=time.time(),
        extra={"dvfs": dvfs},
    )
    nc: Client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
    clocks: list[tuple[float, float]] = []
    states: list[InstanceState] = []

    async def on_stats(msg: Msg) -> None:
        stats = decode(msg.data, WorkerStats)
        clocks.append((stats.at, stats.clock_mhz))

    async def on_state(msg: Msg) -> None:
        states.append(decode(msg.data, InstanceState))

    try:
        subjects = Subjects(namespace)
        await nc.subscribe(subjects.worker_stats_wildcard, cb=on_stats)
        await nc.subscribe(subjects.instance_state_wildcard, cb=on_state)
        async with run_in_process(stack_launches(spec)):
            started = time.time()
            result = await replay(nc, subjects, trace, model=spec.model, speedup=speedup)
    finally:
        await nc.close()
    return ClockedReplay(result, started, clocks, states)


async def test_predictive_dvfs_lowers_clocks_when_light_and_raises_them_under_a_burst(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that predictive dvfs runs a trickle below max clock and a burst near it, losing none.

    Workers publish their InstanceState; the agent projects it with the IPS model (fitted
    before the stack starts, as the agent's first sight of the worker would) and sends
    clocks on the node-bound v2 subject.
    """
    speedup = 5.0  # control-plane wall delays count ×K against model-time deadlines
    simulator_models(("A100-80GB", "llama-3-8b", 1, 64))
    burst_at_s = 24.0
    light = [TraceRequest(t_s=2.0 * i, prompt_tokens=200, output_tokens=120) for i in range(12)]
    burst = [TraceRequest(t_s=burst_at_s, prompt_tokens=1500, output_tokens=250)] * 60
    run = await _replay_on_one_worker(nats_server, redis_server, namespace, [*light, *burst],
                                      speedup=speedup, dvfs={"mode": "predictive"})  # fmt: skip
    result, started, clocks, states = run.result, run.started, run.clocks, run.states
    assert all(r.completion is not None for r in result.records)
    assert max(len(s.requests) for s in states) >= 30  # the burst reached the agent
    burst_wall = started + burst_at_s / speedup
    before = [mhz for at, mhz in clocks if started + 1.0 < at < burst_wall]
    after = [mhz for at, mhz in clocks if at > burst_wall]
    assert before
    assert after
    assert min(before) < 1000.0, before  # light load: well below the 1410 MHz maximum
    assert max(after) >= 1300.0, after  # the burst's deadlines need (nearly) full speed


async def test_profile_dvfs_learns_the_lengths_then_runs_light_load_low_and_a_burst_high(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test DynamoLLM's instance manager live: profile swept from served lengths, then clocks.

    The agent sweeps the worker's profile once 8 completions have told it the lengths; the
    trickle after that runs at a low clock, and the burst's long first tokens raise an
    emergency (maximum clock) with none lost.
    """
    speedup = 5.0
    burst_at_s = 44.0
    light = [TraceRequest(t_s=1.0 * i, prompt_tokens=200, output_tokens=120) for i in range(40)]
    burst = [TraceRequest(t_s=burst_at_s, prompt_tokens=1500, output_tokens=250)] * 60
    dvfs: dict[str, object] = {"mode": "profile", "profile_min_requests": 8}
    run = await _replay_on_one_worker(nats_server, redis_server, namespace, [*light, *burst],
                                      speedup=speedup, dvfs=dvfs)  # fmt: skip
    result, started, clocks = run.result, run.started, run.clocks
    assert all(r.completion is not None for r in result.records)
    burst_wall = started + burst_at_s / speedup
    changes = [(round((at - started) * speedup, 1), mhz) for at, mhz in clocks]
    changes = [c for i, c in enumerate(changes) if i == 0 or c[1] != changes[i - 1][1]]
    print(f"clock changes (model s from the start, MHz): {changes}", file=sys.stderr)
    before = [mhz for at, mhz in clocks if started < at < burst_wall]
    after = [mhz for at, mhz in clocks if at > burst_wall]
    assert before
    assert after
    assert before[0] == pytest.approx(1410.0)  # no profile yet: the clock is left at its max
    assert min(before) < 1000.0, before  # the trickle, once profiled: well below 1410 MHz
    assert max(after) >= 1300.0, after  # the burst: an emergency, or its load, needs full speed
