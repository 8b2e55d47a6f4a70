"""``greenserve bench control-plane``: how many requests per second the control plane sustains.

Workers use the ``instant`` backend (every request done at once, no model time), so what is
measured is the control plane alone: ingress (JetStream) → classifier → scheduler (Redis) →
router → worker → client. An open-loop Poisson load steps up through the given rates; at
each step we record the offered and achieved rate, the added latency (publish → completion
received, wall) and the CPU the stack's processes used (from /proc, servers included).
``sustained_rps`` is the highest step where every request completed, the achieved rate kept
up with the offered one (≥ 95 %) and p99 added latency stayed bounded. ``--request-path``
picks the deployment of classifier, scheduler and router (one co-located process, three
separate ones, or both alternately for an A/B comparison on the same machine load).
``--cells N`` runs N whole stacks on the same servers (each request to one at random) and
``--clients N`` sends the load from N processes (``loadgen.client_pool``). ``--entry http``
sends the same requests as OpenAI clients would, ``POST /v1/completions`` to the gateways
(``loadgen.http_replay``), so the HTTP front door's cost is measured too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from greenserve.argtypes import UsageError, positive_float, positive_floats, positive_int
from greenserve.bench.control_plane_plots import plot_control_plane
from greenserve.local import LocalStack, start_cells
from greenserve.stack import StackSpec
from loadgen.client_pool import ClientPool, split_at_random
from loadgen.http_replay import replay_http
from loadgen.replay import ClientRecord, replay_parts
from loadgen.traces import TraceRequest, synthetic_trace
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.gc_pauses import collector_paused
from shared.lifecycle import event_loop_factory

__all__ = [
    "HELP",
    "HOPS",
    "NAME",
    "REQUEST_PATHS",
    "add_arguments",
    "hop_breakdown",
    "run",
    "wait_quiet",
]

NAME = "control-plane"
HELP = "sustained req/s and p99 added latency of the control plane with instant workers"

ENTRIES = ("nats", "http")
"""``nats``: clients publish to the ingress stream; ``http``: OpenAI clients call the gateway."""
P99_BOUND_MS = 100.0
"""A step whose p99 exceeds this is queueing without bound, not sustaining the rate."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
QUIET_CORES = 0.3
"""The stack counts as settled when its processes use less CPU than this at no load (the
forecaster fits its models at start-up, which would otherwise be charged to the first steps)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Load steps."""
    parser.add_argument(
        "--rates",
        type=positive_floats,
        default="100,200,400,800,1200,1600,2000",
        help="req/s steps, comma-separated",
    )
    parser.add_argument("--step-s", type=positive_float, default=5.0, help="seconds per step")
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument(
        "--request-path",
        choices=(*REQUEST_PATHS, "both"),
        default="colocated",
        help="classifier+scheduler+router in one process (colocated), three (separate), "
        "or both alternately for an A/B comparison",
    )
    parser.add_argument(
        "--cells",
        type=positive_int,
        default=1,
        help="independent stacks (cells) on the same NATS and Redis, the workers split among "
        "them and each request sent to one at random; each cell schedules and places only on "
        "its own workers (docs/performance.md, cells)",
    )
    parser.add_argument(
        "--clients",
        type=positive_int,
        default=1,
        help="load-generator processes, each sending a random share of the requests (one "
        "client's own event loop delays the completions it stamps; docs/performance.md)",
    )
    parser.add_argument(
        "--entry",
        choices=(*ENTRIES, "both"),
        default="nats",
        help="where the load enters: the JetStream ingress (nats), the OpenAI-compatible "
        "gateway over HTTP (http: a gateway drawn at random per request, each spreading over "
        "every cell; one client, no --hops), or both alternately for an A/B comparison",
    )
    parser.add_argument(
        "--repeat", type=positive_int, default=1, help="runs per variant (request path or entry)"
    )
    parser.add_argument(
        "--hops",
        action="store_true",
        help="stamp every request at each hop and report per-hop p50/p99 (key 'hops')",
    )
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="write control_plane.png there: latency and CPU per request by rate (and "
        "p99 per hop with --hops)",
    )


def _cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLOCK_TICKS


def _machine_s() -> tuple[float, float]:
    """Seconds the whole machine's CPUs spent busy and stolen by the hypervisor so far, from
    ``/proc/stat``: what a step's own processes do not account for is someone else's work."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, already in user]
    busy = sum(fields[:8]) - fields[3] - fields[4] - fields[7]
    return busy / CLOCK_TICKS, fields[7] / CLOCK_TICKS


def wait_quiet(pids: list[int], timeout_s: float = 90.0, stacks: int = 1) -> float:
    """Wait until the idle stacks' start-up work is done; return the idle CPU (cores).

    Each of ``stacks`` may idle at up to :data:`QUIET_CORES` (heartbeats, control loops),
    so N cells settle below N times that, not below one stack's bound they would never
    reach.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        before = _cpu_s(pids)
        time.sleep(1.0)
        idle = _cpu_s(pids) - before
        if idle < QUIET_CORES * stacks or time.monotonic() > deadline:
            return idle


HOPS = (
    ("ack", "pub", "ack"),
    ("ingress", "pub", "fetch"),
    ("classify", "fetch", "submit"),
    ("queue", "submit", "pull"),
    ("store", "submit", "stored"),
    ("wake", "stored", "pull"),
    ("place", "pull", "dispatch"),
    ("dispatch", "dispatch", "accepted"),
    ("worker", "accepted", "done"),
    ("reply", "done", "recv"),
)
"""(gap, from stamp, to stamp). ``ack``: JetStream publish → its ack at the client (beside
the path, not on it); ``ingress``: publish → the classifier's fetch returned the message;
``classify``: classify and validate; ``queue``: hand-off to the scheduler (Redis), its ready
signal and the router's pull, split (co-located path only) into ``store`` (the Redis
write, submit → stored) and ``wake`` (stored → the router's pull); ``place``: placement
and any wait for the worker's previous batch in flight; ``dispatch``: router → worker
(NATS); ``worker``: backend and completion publish;
``reply``: completion → client (NATS)."""


def hop_breakdown(records: list[ClientRecord]) -> dict[str, Any] | None:
    """Per-hop p50/p99 (ms) of stamped requests, and the mean gaps of the slowest 1 %."""
    stamped = [r for r in records if r.completion is not None and "recv" in r.hops]
    if not stamped:
        return None
    for r in stamped:
        r.hops["accepted"] = r.completion.accepted_at if r.completion else 0.0
    # A hop is reported where every request carries both its stamps: ``store`` and ``wake``
    # split the queue inside the co-located process, and the separate path has no ``stored``.
    gaps = {
        name: np.array([(r.hops[b] - r.hops[a]) * 1000.0 for r in stamped])
        for name, a, b in HOPS
        if all(a in r.hops and b in r.hops for r in stamped)
    }
    total = np.array([(r.hops["recv"] - r.hops["pub"]) * 1000.0 for r in stamped])
    slow = total >= np.percentile(total, 99)
    return {
        "requests": len(stamped),
        "p50_ms": {k: float(np.percentile(v, 50)) for k, v in gaps.items()},
        "p99_ms": {k: float(np.percentile(v, 99)) for k, v in gaps.items()},
        "max_ms": {k: float(v.max()) for k, v in gaps.items()},
        # Where the slowest 1 % spent their time: the hop that holds them.
        "slowest_1pct_mean_ms": {k: float(v[slow].mean()) for k, v in gaps.items()},
        "slowest_1pct_total_ms": float(total[slow].mean()),
    }


def _named_pids(stacks: list[LocalStack]) -> dict[str, int]:
    """Every stack process and server by name; a second cell's names carry its namespace."""
    named: dict[str, int] = {}
    for i, stack in enumerate(stacks):
        prefix = "" if i == 0 else f"{stack.state.namespace}/"
        for name, pid in {**stack.state.pids, **stack.state.server_pids}.items():
            named[prefix + name] = pid
    return named


async def _step(
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
        return await _http_step(stacks, trace, step_s, seed)
    # Each request to a cell drawn at random: a random split of a Poisson stream is Poisson
    # in every cell (a round-robin split would smooth each cell's arrivals, flattering it).
    traces = split_at_random(trace, len(stacks), seed)
    cells = [(stack.state.namespace, part) for stack, part in zip(stacks, traces, strict=True)]
    named = _named_pids(stacks)
    nats_url = stacks[0].state.nats_url
    pool = None
    if clients > 1:
        pool = ClientPool(nats_url, cells, clients, seed=seed, model="llama-3-8b", hops=hops)
        await asyncio.to_thread(pool.start)
    nc = None if pool else await connect_nats(NatsSettings(url=nats_url), "control-plane-bench")
    each0 = {name: _cpu_s([pid]) for name, pid in named.items()}
    busy0, steal0 = _machine_s()
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
    busy1, steal1 = _machine_s()
    # One /proc read per process; the stack's total is their sum.
    used = {name: _cpu_s([pid]) - each0[name] for name, pid in named.items()}
    done = [r for r in records if r.completion is not None]
    dispatch_ms = np.array(
        [(r.completion.accepted_at - r.sent_at) * 1000.0 for r in done if r.completion]
    )
    step = _step_result(
        len(trace) / step_s,
        [(r.sent_at, r.ended_at) for r in done],
        used,
        wall,
        time.process_time() - own0 + clients_cpu_s,
    )
    step["requests"] = len(trace)
    # Busy beyond the stack and the load generator: another tenant, or a process an earlier
    # run left behind (round 15's slow second runs); steal: the hypervisor's.
    step["other_cores"] = round(
        (busy1 - busy0) / wall - step["cpu_cores"] - step["loadgen_cpu_cores"], 3
    )
    step["steal_cores"] = round((steal1 - steal0) / wall, 3)
    step["p99_dispatch_ms"] = float(np.percentile(dispatch_ms, 99)) if len(done) else None
    if hops:
        step["hops"] = hop_breakdown(records)
    return step


async def _http_step(
    stacks: list[LocalStack], trace: list[TraceRequest], step_s: float, seed: int
) -> dict[str, Any]:
    """One step through the gateways: each request to a gateway drawn at random."""
    named = _named_pids(stacks)
    urls = [stack.state.gateway_url or "" for stack in stacks]
    each0 = {name: _cpu_s([pid]) for name, pid in named.items()}
    own0, t0 = time.process_time(), time.monotonic()
    records = await replay_http(urls, trace, model="llama-3-8b", seed=seed)
    wall = time.monotonic() - t0
    used = {name: _cpu_s([pid]) - each0[name] for name, pid in named.items()}
    done = [r for r in records if r.ok]
    step = _step_result(
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


def _step_result(
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
        # which sets how long requests queue in it (docs/performance.md, round 10).
        "cpu_cores_by_process": {name: round(t / wall, 3) for name, t in used_cpu_s.items()},
    }


REQUEST_PATHS = ("colocated", "separate")
"""``colocated``: classifier, scheduler and router in one process (``services.requestpath``);
``separate``: three processes talking over NATS."""


def _spec(workers: int, request_path: str) -> StackSpec:
    return StackSpec(
        namespace="cp",
        workers=workers,
        regions=("PJM",),
        max_num_seqs=4096,
        extra={"worker": {"backend": "instant"}, "telemetry": {"log_level": "WARNING"}},
        colocate_request_path=request_path == "colocated",
    )


def _sweep(
    spec: StackSpec,
    rates: list[float],
    step_s: float,
    hops: bool = False,
    cells: int = 1,
    clients: int = 1,
    entry: str = "nats",
) -> dict[str, Any]:
    """Fresh stacks, the load steps up; the best step that sustained its rate.

    With ``cells`` > 1 the first cell starts the servers and the others join them under
    their own namespaces (``cp1`` …), each with its share of ``spec.workers``
    (:func:`greenserve.local.cells.start_cells`).
    """
    steps: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gs-cp-") as folder:
        stacks: list[LocalStack] = []
        try:
            # The first cell settles before the others start, so they load its fits.
            stacks = start_cells(
                spec,
                Path(folder),
                cells,
                settle=lambda first: wait_quiet(list(_named_pids([first]).values())),
            )
            for stack in stacks:
                stack.wait_ready()
            busy0, _ = _machine_s()
            t_quiet = time.monotonic()
            idle = wait_quiet(list(_named_pids(stacks).values()), stacks=len(stacks))
            busy1, _ = _machine_s()
            machine = (busy1 - busy0) / max(time.monotonic() - t_quiet, 1e-9)
            print(
                f"  stack settled (idle CPU {idle:.2f} cores; whole machine {machine:.2f}"
                " while it settled)",
                file=sys.stderr,
                flush=True,
            )
            for i, rate in enumerate(rates):
                # The client's own collector pauses would stamp completions late.
                with (
                    collector_paused(),
                    asyncio.Runner(loop_factory=event_loop_factory()) as runner,
                ):
                    result = runner.run(
                        _step(stacks, rate, step_s, i, hops=hops, clients=clients, entry=entry)
                    )
                print(f"  {rate:g} req/s: {result}", file=sys.stderr, flush=True)
                steps.append(result)
                if (
                    result["completed"] < result["requests"]
                    or (result["p99_added_ms"] or 0) > 10 * P99_BOUND_MS
                ):
                    break
        finally:
            # The first cell owns the servers: stop the others' services before them.
            for stack in reversed(stacks):
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
        "good_steps": [s["offered_rps"] for s in good],
        "sustained_rps": best["offered_rps"] if best else 0.0,
        "p99_added_ms": best["p99_added_ms"] if best else None,
        "cpu_cores": best["cpu_cores"] if best else None,
        "steps": steps,
    }


def _goal_met(run: dict[str, Any], goal_rps: float, goal_p99: float) -> bool:
    """Some sustained step offered at least the goal's rate with p99 within the goal's bound.

    Read per step, not at ``sustained_rps``: a sweep that goes on past 2,000 req/s must not
    hide a met goal behind a higher step's longer tail.
    """
    good = set(run["good_steps"])
    return any(
        s["offered_rps"] in good
        and s["offered_rps"] >= goal_rps
        and (s["p99_added_ms"] or float("inf")) <= goal_p99
        for s in run["steps"]
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Step the load up until the control plane stops keeping up.

    With ``--request-path both`` the two deployments alternate (colocated, separate,
    colocated, … ``--repeat`` times each), so an A/B comparison sees the same machine load;
    the top-level numbers are those of the first deployment named, from its median run.
    """
    rates = list(args.rates)
    paths = list(REQUEST_PATHS) if args.request_path == "both" else [args.request_path]
    entries = list(ENTRIES) if args.entry == "both" else [args.entry]
    if len(paths) > 1 and len(entries) > 1:
        raise UsageError("compare request paths or entries, not both at once")
    if "http" in entries and (args.clients > 1 or args.hops):
        raise UsageError("--entry http sends from one client and takes no --hops")
    if args.cells > args.workers:
        raise UsageError(f"{args.cells} cells need at least as many workers, not {args.workers}")
    # Each variant is one (request path, entry); its label names what differs.
    variants = [(p, e) for p in paths for e in entries]
    labels = [e if len(entries) > 1 else p for p, e in variants]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for repeat in range(args.repeat):
        for label, (path, entry) in zip(labels, variants, strict=True):
            print(f"{label}, run {repeat + 1}", file=sys.stderr, flush=True)
            runs[label].append(
                _sweep(
                    _spec(args.workers, path),
                    rates,
                    args.step_s,
                    args.hops,
                    args.cells,
                    args.clients,
                    entry,
                )
            )
    primary = sorted(
        runs[labels[0]], key=lambda r: (r["sustained_rps"], -(r["p99_added_ms"] or 1e9))
    )[(args.repeat - 1) // 2]
    goal = {"sustained_rps": 2000.0, "p99_added_ms": 5.0}
    goal_rps, goal_p99 = goal["sustained_rps"], goal["p99_added_ms"]
    plots = (
        []
        if args.plots is None
        else [str(plot_control_plane(runs, primary, goal, args.plots / "control_plane.png"))]
    )
    return {
        "sustained_rps": primary["sustained_rps"],
        "p99_added_ms": primary["p99_added_ms"],
        "cpu_cores": primary["cpu_cores"],
        "machine_cores": len(os.sched_getaffinity(0)),
        "cells": args.cells,
        "clients": args.clients,
        "goal_met": _goal_met(primary, goal_rps, goal_p99),
        "request_path": variants[0][0],
        "entry": variants[0][1],
        "steps": primary["steps"],
        "runs": runs,
        "summary": {
            label: {
                "sustained_rps": [r["sustained_rps"] for r in rs],
                "p99_added_ms": [r["p99_added_ms"] for r in rs],
                "p99_by_rate_ms": [
                    {f"{s['offered_rps']:.0f}": s["p99_added_ms"] for s in r["steps"]} for r in rs
                ],
                "cpu_ms_per_request_by_rate": [
                    {f"{s['offered_rps']:.0f}": s["cpu_ms_per_request"] for s in r["steps"]}
                    for r in rs
                ],
                "goal_met": [_goal_met(r, goal_rps, goal_p99) for r in rs],
            }
            for label, rs in runs.items()
        },
        "goal": goal,
        "plots": plots,
    }
