"""``greenserve bench control-plane``: how many requests per second the control plane sustains.

Workers use the ``instant`` backend (every request done at once, no model time), so what is
measured is the control plane alone: ingress (JetStream) → classifier → scheduler (Redis) →
router → worker → client. An open-loop Poisson load steps up through the given rates; at
each step we record the offered and achieved rate, the added latency (publish → completion
received, wall) and the CPU the stack's processes used (from /proc, servers included).
``sustained_rps`` is the highest step where every request completed, the achieved rate kept
up with the offered one (≥ 95 %) and p99 added latency stayed bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from greenserve.local import LocalStack, start_local_stack
from greenserve.stack import StackSpec
from loadgen.replay import replay
from loadgen.traces import synthetic_trace
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.lifecycle import event_loop_factory

__all__ = ["HELP", "NAME", "add_arguments", "run", "wait_quiet"]

NAME = "control-plane"
HELP = "sustained req/s and p99 added latency of the control plane with instant workers"

P99_BOUND_MS = 100.0
"""A step whose p99 exceeds this is queueing without bound, not sustaining the rate."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
QUIET_CORES = 0.3
"""The stack counts as settled when its processes use less CPU than this at no load (the
forecaster fits its models at start-up, which would otherwise be charged to the first steps)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Load steps."""
    parser.add_argument("--rates", default="100,200,400,800,1200,1600,2000", help="req/s steps")
    parser.add_argument("--step-s", type=float, default=5.0, help="seconds per step")
    parser.add_argument("--workers", type=int, default=2)


def _cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLOCK_TICKS


def wait_quiet(pids: list[int], timeout_s: float = 90.0) -> float:
    """Wait until the idle stack's start-up work is done; return the idle CPU (cores)."""
    deadline = time.monotonic() + timeout_s
    while True:
        before = _cpu_s(pids)
        time.sleep(1.0)
        idle = _cpu_s(pids) - before
        if idle < QUIET_CORES or time.monotonic() > deadline:
            return idle


async def _step(stack: LocalStack, rate: float, step_s: float, seed: int) -> dict[str, Any]:
    trace = synthetic_trace(
        rate_rps=rate, duration_s=step_s, seed=seed, mean_prompt_tokens=200, mean_output_tokens=16
    )
    pids = list(stack.state.pids.values()) + list(stack.state.server_pids.values())
    nc = await connect_nats(NatsSettings(url=stack.state.nats_url), "control-plane-bench")
    cpu0, own0, t0 = _cpu_s(pids), time.process_time(), time.monotonic()
    try:
        result = await replay(
            nc,
            Subjects(stack.state.namespace),
            trace,
            model="llama-3-8b",
            speedup=1.0,
            settle_timeout_s=10,
        )
    finally:
        await nc.close()
    wall = time.monotonic() - t0
    done = [r for r in result.records if r.completion is not None]
    added_ms = np.array([(r.ended_at - r.sent_at) * 1000.0 for r in done])
    dispatch_ms = np.array(
        [(r.completion.accepted_at - r.sent_at) * 1000.0 for r in done if r.completion]
    )
    span = max(r.ended_at for r in done) - min(r.sent_at for r in done) if done else 1.0
    return {
        "offered_rps": len(trace) / step_s,
        "achieved_rps": len(done) / max(span, 1e-9),
        "requests": len(trace),
        "completed": len(done),
        "p50_added_ms": float(np.percentile(added_ms, 50)) if len(done) else None,
        "p99_added_ms": float(np.percentile(added_ms, 99)) if len(done) else None,
        "p99_dispatch_ms": float(np.percentile(dispatch_ms, 99)) if len(done) else None,
        "cpu_cores": (_cpu_s(pids) - cpu0) / wall,
        "loadgen_cpu_cores": (time.process_time() - own0) / wall,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Step the load up until the control plane stops keeping up."""
    spec = StackSpec(
        namespace="cp",
        workers=args.workers,
        regions=("PJM",),
        max_num_seqs=4096,
        extra={"worker": {"backend": "instant"}, "telemetry": {"log_level": "WARNING"}},
    )
    steps: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gs-cp-") as folder:
        stack = start_local_stack(spec, Path(folder))
        try:
            stack.wait_ready()
            pids = list(stack.state.pids.values()) + list(stack.state.server_pids.values())
            idle = wait_quiet(pids)
            print(f"  stack settled (idle CPU {idle:.2f} cores)", file=sys.stderr, flush=True)
            for i, rate in enumerate(float(r) for r in args.rates.split(",")):
                with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                    result = runner.run(_step(stack, rate, args.step_s, seed=i))
                print(f"  {rate:g} req/s: {result}", file=sys.stderr, flush=True)
                steps.append(result)
                if (
                    result["completed"] < result["requests"]
                    or (result["p99_added_ms"] or 0) > 10 * P99_BOUND_MS
                ):
                    break
        finally:
            stack.stop()
    good = [
        s
        for s in steps
        if s["completed"] == s["requests"]
        and s["achieved_rps"] >= 0.95 * s["offered_rps"]
        and (s["p99_added_ms"] or float("inf")) <= P99_BOUND_MS
    ]
    best = max(good, key=lambda s: s["offered_rps"]) if good else None
    return {
        "sustained_rps": best["offered_rps"] if best else 0.0,
        "p99_added_ms": best["p99_added_ms"] if best else None,
        "cpu_cores": best["cpu_cores"] if best else None,
        "machine_cores": os.cpu_count(),
        "steps": steps,
        "goal": {"sustained_rps": 2000, "p99_added_ms": 5.0},
    }
