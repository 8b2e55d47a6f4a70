"""``greenserve bench overload``: a multiple of the stack's capacity, over HTTP and NATS.

One local stack of simulated workers (in real time by default, so a request's SLO is
seconds, not the tenths a speed-up leaves) with its default ceilings, the scheduler's
wait bound sized to the SLO (``--max-queue-wait-s``). First its capacity is *measured*:
a closed loop keeps twice the workers' batch slots in flight over NATS for
``--calibrate-s`` and counts completions per second over the second half. Then, per
entry, ``--factor`` × that rate of Poisson arrivals of one request shape for
``--duration-s``: over HTTP through the gateway as an OpenAI client (each request a
``POST /v1/completions``), and over NATS on the client's ingress subject
(:func:`loadgen.replay.replay`). The gateway's resident memory is read from ``/proc``
before, throughout (peak) and after the HTTP entry.

Goals (each reported with its measurement): every request answered (completed, 429 with
``Retry-After``, or an explicit error) within ``--answer-bound-s``, nothing answered
twice; the gateway's RSS grows at most ``--rss-growth-mb``; the p99 latency of admitted
(completed) requests within their SLO (``alpha_llf · Lat``, :mod:`.score`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from greenserve.bench.overload.options import HELP, NAME, add_arguments
from greenserve.bench.overload.score import score_http, score_nats
from greenserve.local import LocalStack, start_local_stack
from greenserve.stack import StackSpec
from loadgen.http_replay import replay_http
from loadgen.replay import REPLY_HEADER, ClientRecord, publish_with_retry, replay
from loadgen.traces import TraceRequest
from proto.codec import DecodeError, decode_any, encode
from proto.messages import Completion, ErrorReply, Request, scoped_request_id
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.config import ClassifierSettings, NatsSettings
from shared.security.client_ids import instance_token

__all__ = ["HELP", "NAME", "add_arguments", "gateway_rss_mb", "poisson_trace", "run"]

RSS_SAMPLE_S = 0.5
"""Wall period of the gateway memory samples during the HTTP entry."""


def gateway_rss_mb(pid: int) -> float:
    """Resident memory of a process (``VmRSS`` of ``/proc/<pid>/status``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise ValueError(f"no VmRSS for process {pid}")


def poisson_trace(
    rate: float, duration_s: float, prompt_tokens: int, output_tokens: int, seed: int
) -> list[TraceRequest]:
    """Poisson arrivals at ``rate`` per second over ``duration_s``, one request shape."""
    pick = random.Random(seed)
    out: list[TraceRequest] = []
    t = pick.expovariate(rate)
    while t < duration_s:
        out.append(TraceRequest(t, prompt_tokens, output_tokens))
        t += pick.expovariate(rate)
    return out


async def _capacity(
    nc: Client, subjects: Subjects, spec: StackSpec, args: argparse.Namespace
) -> tuple[float, list[Completion]]:
    """Completions per second with ``2 × slots`` requests always in flight (closed loop),
    over the second half of ``args.calibrate_s``; and the completions seen."""
    js = nc.jetstream()
    client_id = f"ovl-cal-{instance_token()}"
    slots = 2 * spec.workers * spec.max_num_seqs
    in_flight = asyncio.Semaphore(slots)
    ended: dict[str, float] = {}
    completions: list[tuple[float, Completion]] = []

    async def on_reply(msg: Msg) -> None:
        try:
            message = decode_any(msg.data)
        except DecodeError:
            return
        rid = getattr(message, "request_id", None)
        if isinstance(message, Completion | ErrorReply) and rid and rid not in ended:
            ended[rid] = time.time()
            if isinstance(message, Completion):
                completions.append((ended[rid], message))
            in_flight.release()

    sub = await nc.subscribe(subjects.client_wildcard(client_id), cb=on_reply)
    started = time.time()
    sent: set[str] = set()
    while time.time() - started < args.calibrate_s:
        await in_flight.acquire()
        rid = f"c{len(sent)}"
        sent.add(rid)
        reply = subjects.client_reply(client_id, rid)
        req = Request(
            request_id=rid,
            model=spec.model,
            reply_subject=reply,
            sent_at=time.time(),
            max_tokens=args.output_tokens,
            prompt_tokens=args.prompt_tokens,
            ignore_eos=True,
            client_id=client_id,
        )
        headers = {"Nats-Msg-Id": scoped_request_id(client_id, rid), REPLY_HEADER: reply}
        await publish_with_retry(
            js, subjects.ingress_client(client_id), encode(req), headers, ClientRecord(rid, _ONE)
        )
    half = started + args.calibrate_s / 2
    rate = sum(1 for at, _ in completions if at >= half) / (time.time() - half)

    async def drained() -> None:  # every permit back: every request ended
        for _ in range(slots):
            await in_flight.acquire()

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(drained(), args.answer_bound_s)
    await sub.unsubscribe()
    return rate, [c for _, c in completions]


_ONE = TraceRequest(0.0, 1, 1)
"""A placeholder trace entry for the calibration's publish records."""


async def _sample_rss(pid: int, samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        samples.append(gateway_rss_mb(pid))
        await asyncio.sleep(RSS_SAMPLE_S)


async def _http_entry(
    stack: LocalStack, trace: list[TraceRequest], spec: StackSpec, args: argparse.Namespace
) -> tuple[list[Any], dict[str, float]]:
    pid = stack.state.pids["gateway"]
    before = gateway_rss_mb(pid)
    samples: list[float] = [before]
    stop = asyncio.Event()
    sampling = asyncio.create_task(_sample_rss(pid, samples, stop))
    try:
        records = await replay_http(
            [stack.state.gateway_url or ""],
            trace,
            model=spec.model,
            timeout_s=args.answer_bound_s,
        )
    finally:
        stop.set()
        await sampling
    await asyncio.sleep(5.0)  # what the gateway would give back, it has by now
    after = gateway_rss_mb(pid)
    rss = {"before_mb": before, "peak_mb": max(samples), "after_mb": after}
    return records, rss


async def _measure(stack: LocalStack, spec: StackSpec, args: argparse.Namespace) -> dict[str, Any]:
    nc = await connect_nats(NatsSettings(url=stack.state.nats_url), "overload-bench")
    subjects = Subjects(spec.namespace)
    alpha = ClassifierSettings().alpha_llf
    try:
        capacity, completions = await _capacity(nc, subjects, spec, args)
        if capacity <= 0 or not completions:
            raise RuntimeError("the calibration completed nothing: the stack does not serve")
        slo_s = alpha * statistics.median(c.lat_s for c in completions) / spec.speedup
        rate = args.factor * capacity
        print(
            f"capacity {capacity:.2f} req/s, offering {rate:.1f} req/s, SLO {slo_s:.2f} s",
            file=sys.stderr,
            flush=True,
        )
        trace = poisson_trace(
            rate, args.duration_s, args.prompt_tokens, args.output_tokens, args.seed
        )
        entries: dict[str, Any] = {}
        for entry in args.entries.split(","):
            print(f"  {entry}: {len(trace)} requests ...", file=sys.stderr, flush=True)
            if entry == "http":
                records, rss = await _http_entry(stack, trace, spec, args)
                entries[entry] = {**score_http(records, slo_s), "gateway_rss": rss}
            elif entry == "nats":
                result = await replay(
                    nc,
                    subjects,
                    [
                        TraceRequest(r.t_s * spec.speedup, r.prompt_tokens, r.output_tokens)
                        for r in trace
                    ],
                    model=spec.model,
                    speedup=spec.speedup,
                    settle_timeout_s=args.answer_bound_s,
                )
                entries[entry] = score_nats(result.records, alpha, spec.speedup)
            else:
                raise ValueError(f"unknown entry {entry!r}: http or nats")
            print(f"  {entry}: {entries[entry]}", file=sys.stderr, flush=True)
    finally:
        await nc.close()
    return {
        "capacity_rps": capacity,
        "offered_rps": rate,
        "calibration_completed": len(completions),
        "slo_s": slo_s,
        "entries": entries,
    }


def _goals(measured: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Pass or fail per goal and entry, with the bound each is judged by."""
    goals: dict[str, Any] = {}
    for entry, got in measured["entries"].items():
        answered = (
            got["unanswered"] == 0
            and got.get("duplicated", 0) == 0
            and got["max_answer_s"] is not None
            and got["max_answer_s"] <= args.answer_bound_s
            and got.get("shed_429_without_retry_after", 0) == 0
        )
        ratio = got["p99_admitted_over_slo"]
        goals[entry] = {
            "every_request_answered_within_bound": answered,
            "p99_admitted_within_slo": ratio is not None and ratio <= 1.0,
        }
        if "gateway_rss" in got:
            rss = got["gateway_rss"]
            goals[entry]["gateway_rss_growth_bounded"] = (
                rss["after_mb"] - rss["before_mb"] <= args.rss_growth_mb
            )
    return goals


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start a stack, measure its capacity, overload it per entry; score the goals."""
    spec = StackSpec(
        namespace="overload",
        workers=args.workers,
        regions=("PJM",),
        max_num_seqs=args.max_num_seqs,
        speedup=args.speedup,
        extra={
            "scheduler": {"max_queue_wait_s": args.max_queue_wait_s},
            "telemetry": {"log_level": "WARNING"},
        },
    )
    with tempfile.TemporaryDirectory(prefix="gs-overload-") as folder:
        stack = start_local_stack(spec, Path(folder))
        try:
            stack.wait_ready()
            measured = asyncio.run(_measure(stack, spec, args))
        finally:
            stack.stop()
    goals = _goals(measured, args)
    return {
        **measured,
        "factor": args.factor,
        "duration_s": args.duration_s,
        "workers": args.workers,
        "max_num_seqs": args.max_num_seqs,
        "speedup": args.speedup,
        "request": {"prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens},
        "stack_ceiling": {
            "scheduler.max_queue_wait_s": args.max_queue_wait_s,
            "scheduler.max_queued_per_pool": "default (4096)",
            "gateway.max_in_flight": "default (half the open-file limit)",
        },
        "bounds": {"answer_s": args.answer_bound_s, "rss_growth_mb": args.rss_growth_mb},
        "goals": goals,
        "goals_met": all(all(g.values()) for g in goals.values()),
    }
