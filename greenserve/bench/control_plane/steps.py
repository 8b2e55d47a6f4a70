"""One load step of the control-plane bench: send a Poisson trace, measure what it cost.

A step replays one rate for ``--step-s`` seconds, over JetStream (one client or a
:class:`~loadgen.client_pool.ClientPool`) or over HTTP to the gateways, and reports the
offered and achieved rate, added latency, and the CPU of every stack process, of the load
generator and of the rest of the machine. The sweep that steps the rate up and judges each
step lives in :mod:`greenserve.bench.control_plane.run`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import numpy as np

from greenserve.bench.control_plane.cpu import cpu_s, machine_s, named_pids
from greenserve.bench.control_plane.hops import hop_breakdown
from greenserve.local import LocalStack
from loadgen.client_pool import ClientPool, split_at_random
from loadgen.http_replay import replay_http
from loadgen.replay import replay_parts
from loadgen.traces import TraceRequest, synthetic_trace
from shared.bus import connect_nats
from shared.config import NatsSettings

__all__ = ["measure_http_step", "measure_step", "step_result"]


async def measure_step(
    stacks: list[LocalStack],
    rate: float,
    step_s: float,
    seed: int,
    hops: bool = False,
    clients: int = 1,
    entry: str = "nats",
) -> dict[str, Any]:
    trace = synthetic_trace(
        rate_rps=rate, duration_s=step_s, seed=seed, mean_prompt_tokens=200, mean_output_tokens=16
    )
    if entry == "http":
        return await measure_http_step(stacks, trace, step_s, seed)
    # Each request to a cell drawn at random: a random split of a Poisson stream is Poisson
    # in every cell (a round-robin split would smooth each cell's arrivals, flattering it).
    traces = split_at_random(trace, len(stacks), seed)
    cells = [(stack.state.namespace, part) for stack, part in zip(stacks, traces, strict=True)]
    named = named_pids(stacks)
    nats_url = stacks[0].state.nats_url
    pool = None
    if clients > 1:
        pool = ClientPool(nats_url, cells, clients, seed=seed, model="llama-3-8b", hops=hops)
        await asyncio.to_thread(pool.start)
    nc = None if pool else await connect_nats(NatsSettings(url=nats_url), "control-plane-bench")
    each0 = {name: cpu_s([pid]) for name, pid in named.items()}
    busy0, steal0 = machine_s()
    own0, t0 = time.process_time(), time.monotonic()
    clients_cpu_s = 0.0
    try:
        if pool is not None:
            pool.go()
            records, clients_cpu_s = await asyncio.to_thread(pool.collect, step_s + 60.0)
        else:
            assert nc is not None
            records = await replay_parts(
                nc, cells, model="llama-3-8b", settle_timeout_s=10, hops=hops
            )
    finally:
        if nc is not None:
            await nc.close()
        if pool is not None:
            pool.close()
    wall = time.monotonic() - t0
    busy1, steal1 = machine_s()
    # One /proc read per process; the stack's total is their sum.
    used = {name: cpu_s([pid]) - each0[name] for name, pid in named.items()}
    done = [r for r in records if r.completion is not None]
    dispatch_ms = np.array(
        [(r.completion.accepted_at - r.sent_at) * 1000.0 for r in done if r.completion]
    )
    step = step_result(
        len(trace) / step_s,
        [(r.sent_at, r.ended_at) for r in done],
        used,
        wall,
        time.process_time() - own0 + clients_cpu_s,
    )
    step["requests"] = len(trace)
    # Busy beyond the stack and the load generator: another tenant, or a process an earlier
    # run left behind (a slow run that follows another); steal: the hypervisor's.
    step["other_cores"] = round(
        (busy1 - busy0) / wall - step["cpu_cores"] - step["loadgen_cpu_cores"], 3
    )
    step["steal_cores"] = round((steal1 - steal0) / wall, 3)
    step["p99_dispatch_ms"] = float(np.percentile(dispatch_ms, 99)) if len(done) else None
    if hops:
        step["hops"] = hop_breakdown(records)
    return step


async def measure_http_step(
    stacks: list[LocalStack], trace: list[TraceRequest], step_s: float, seed: int
) -> dict[str, Any]:
    """One step through the gateways: each request to a gateway drawn at random."""
    named = named_pids(stacks)
    urls = [stack.state.gateway_url or "" for stack in stacks]
    each0 = {name: cpu_s([pid]) for name, pid in named.items()}
    own0, t0 = time.process_time(), time.monotonic()
    records = await replay_http(urls, trace, model="llama-3-8b", seed=seed)
    wall = time.monotonic() - t0
    used = {name: cpu_s([pid]) - each0[name] for name, pid in named.items()}
    done = [r for r in records if r.ok]
    step = step_result(
        len(trace) / step_s,
        [(r.sent_at, r.ended_at) for r in done],
        used,
        wall,
        time.process_time() - own0,
    )
    step["requests"] = len(trace)
    errors = Counter(r.error or str(r.status) for r in records if not r.ok)
    step["errors"] = dict(errors)
    return step


def step_result(
    offered_rps: float,
    done: list[tuple[float, float]],
    used_cpu_s: dict[str, float],
    wall: float,
    loadgen_cpu_s: float,
) -> dict[str, Any]:
    """A step's figures from its answered requests' (sent, ended) wall times and the CPU
    seconds each stack process used."""
    added_ms = np.array([(ended - sent) * 1000.0 for sent, ended in done])
    span = max(e for _, e in done) - min(s for s, _ in done) if done else 1.0
    stack_cpu_s = sum(used_cpu_s.values())
    return {
        "offered_rps": offered_rps,
        "achieved_rps": len(done) / max(span, 1e-9),
        "completed": len(done),
        "p50_added_ms": float(np.percentile(added_ms, 50)) if len(done) else None,
        "p99_added_ms": float(np.percentile(added_ms, 99)) if len(done) else None,
        "cpu_cores": stack_cpu_s / wall,
        # Work per request, comparable between deployments whatever CPU share each got.
        "cpu_ms_per_request": 1000.0 * stack_cpu_s / max(len(done), 1),
        "loadgen_cpu_cores": loadgen_cpu_s / wall,
        # One event loop per process: the busiest one's share of a core is its utilisation,
        # which sets how long requests queue in it (docs/performance.md, "One request path").
        "cpu_cores_by_process": {name: round(t / wall, 3) for name, t in used_cpu_s.items()},
    }
