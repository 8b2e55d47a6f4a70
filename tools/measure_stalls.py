"""How often this host stops running our processes: the floor under any p99.

A request crosses six processes (load generator, nats-server, request path, Redis, worker,
nats-server again). If the machine stops running them now and then (a VM's virtual CPUs
descheduled by its host, page faults served by the host, another tenant), every request in
flight then waits for the stall to end, whatever the request path does. This measures that
with no request path at all: ``--procs`` processes each sleep 1 ms in a loop for
``--seconds`` and record how late each wake-up came.

Reported (JSON, one line):

* ``late_ms``: p50 / p99 / p99.9 / max of the lateness of a 1 ms sleep, all processes;
* ``stalls``: wake-ups later than ``--threshold-ms``, and ``stalled_share``: the share of
  wall time that a process spent inside such stalls (a request arriving then waits). Where
  that share approaches 1 %, p99 latency cannot stay under the threshold on this host;
* ``coincident_share``: of the stalls, the share that overlap a stall of another process.
  Near 1: the whole machine stops (a VM paused); near 0: CPUs stall one at a time;
* ``steal_share``: steal time over the run from ``/proc/stat``, as a share of all CPU time
  (what the hypervisor reports taking; 0 where it reports nothing).

``--pin`` puts each process on its own CPU (spread over the machine). Run it idle, and
beside a bench to see what the bench's processes meet (``docs/performance.md``, "Stalls").

    python tools/measure_stalls.py [--procs 4] [--seconds 20] [--threshold-ms 2] [--pin]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

__all__ = ["main"]

PERIOD_S = 0.001


def _steal_and_total_ticks() -> tuple[int, int]:
    """Steal and total CPU ticks, all CPUs (``/proc/stat``'s first line)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    steal = fields[7] if len(fields) > 7 else 0
    # guest and guest_nice (fields 8, 9) are already counted in user and nice.
    return steal, sum(fields[:8])


def _sleeper(seconds: float, threshold_s: float, cpu: int | None, out: Connection) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    late: list[float] = []
    stalls: list[tuple[float, float]] = []
    end = time.monotonic() + seconds
    while True:
        before = time.monotonic()
        if before >= end:
            break
        time.sleep(PERIOD_S)
        after = time.monotonic()
        lateness = after - before - PERIOD_S
        late.append(lateness)
        if lateness > threshold_s:
            # CLOCK_MONOTONIC is one clock for the whole machine: intervals compare across
            # processes.
            stalls.append((before + PERIOD_S, after))
    out.send((late, stalls))
    out.close()


def _overlaps(interval: tuple[float, float], others: list[tuple[float, float]]) -> bool:
    start, end = interval
    return any(s < end and start < e for s, e in others)


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threshold-ms", type=float, default=2.0)
    parser.add_argument("--pin", action="store_true", help="one CPU per process, spread out")
    args = parser.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    step = max(1, len(cpus) // args.procs)
    pins: list[int | None] = [
        cpus[(i * step) % len(cpus)] if args.pin else None for i in range(args.procs)
    ]
    context = mp.get_context("fork")
    pipes, procs = [], []
    steal0, total0 = _steal_and_total_ticks()
    wall0 = time.monotonic()
    for cpu in pins:
        receive, send = context.Pipe(duplex=False)
        proc = context.Process(
            target=_sleeper, args=(args.seconds, args.threshold_ms / 1000.0, cpu, send)
        )
        proc.start()
        pipes.append(receive)
        procs.append(proc)
    results = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join()
    wall = time.monotonic() - wall0
    steal1, total1 = _steal_and_total_ticks()
    late_ms = np.concatenate([np.asarray(late) for late, _ in results]) * 1000.0
    stall_lists = [stalls for _, stalls in results]
    n_stalls = sum(len(s) for s in stall_lists)
    coincident = sum(
        _overlaps(interval, [o for j, other in enumerate(stall_lists) if j != i for o in other])
        for i, stalls in enumerate(stall_lists)
        for interval in stalls
    )
    stalled_s = sum(end - start for stalls in stall_lists for start, end in stalls)
    report: dict[str, object] = {
        "procs": args.procs,
        "pinned_cpus": [c for c in pins if c is not None],
        "cpus": len(cpus),
        "seconds": round(wall, 2),
        "threshold_ms": args.threshold_ms,
        "late_ms": {
            "p50": round(float(np.percentile(late_ms, 50)), 4),
            "p99": round(float(np.percentile(late_ms, 99)), 4),
            "p99.9": round(float(np.percentile(late_ms, 99.9)), 4),
            "max": round(float(late_ms.max()), 3),
        },
        "stalls": n_stalls,
        "stalls_per_s": round(n_stalls / (wall * args.procs), 3),
        "stalled_share": round(stalled_s / (wall * args.procs), 5),
        "coincident_share": round(coincident / n_stalls, 3) if n_stalls else None,
        "steal_share": round((steal1 - steal0) / max(1, total1 - total0), 5),
    }
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()
