"""Profile the request path: CPU per request of every stack process under a steady load.

Starts the same stack as ``greenserve bench control-plane`` (instant workers), replays an
open-loop Poisson load at one rate and reports, for each service and server process, the
CPU seconds it used per 1,000 requests (from ``/proc/<pid>/stat``) and the read and write
system calls it made per request (``/proc/<pid>/io``; on a VM a socket write that wakes
another process costs ~0.1 ms of CPU, so they count), the load generator (this process)
included. With ``--py-spy DIR``
it also samples every service process with py-spy (when installed and allowed to attach)
and writes one flame-graph-ready collapsed-stack file per process, plus the top frames.

Usage::

    .venv/bin/python tools/profile_request_path.py --rate 1000 --seconds 6 [--py-spy /tmp/prof]
        [--request-path colocated]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from greenserve.bench.control_plane.run import CLOCK_TICKS
from greenserve.local import LocalStack, start_local_stack
from greenserve.stack import StackSpec
from loadgen.replay import replay
from loadgen.traces import synthetic_trace
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.config import NatsSettings

__all__ = ["main"]

QUIET_CORES = 0.3


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    # Older commits (A/B runs from a worktree) have no event_loop_factory.
    try:
        from shared.lifecycle import event_loop_factory
    except ImportError:
        return None
    return event_loop_factory()


def _collector_paused() -> contextlib.AbstractContextManager[None]:
    # Older commits have no gc_pauses: their load generator ran with the collector on.
    try:
        from shared.gc_pauses import collector_paused
    except ImportError:
        return contextlib.nullcontext()
    return collector_paused()


def _wait_quiet(pids: list[int], timeout_s: float = 90.0) -> None:
    """Wait until start-up work (the forecaster's fits) is over."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = sum(_cpu_ticks(pid) for pid in pids)
        time.sleep(1.0)
        if (sum(_cpu_ticks(pid) for pid in pids) - before) / CLOCK_TICKS < QUIET_CORES:
            return


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return int(fields[11]) + int(fields[12])


async def _load(stack: LocalStack, rate: float, seconds: float) -> tuple[int, float]:
    trace = synthetic_trace(
        rate_rps=rate, duration_s=seconds, seed=7, mean_prompt_tokens=200, mean_output_tokens=16
    )
    nc = await connect_nats(NatsSettings(url=stack.state.nats_url), "profile-request-path")
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
    done = [r for r in result.records if r.completion is not None]
    added = sorted((r.ended_at - r.sent_at) * 1000.0 for r in done)
    p99 = added[int(0.99 * (len(added) - 1))] if added else float("nan")
    return len(done), p99


def _top_frames(collapsed: Path, limit: int = 12) -> list[tuple[str, float]]:
    """Self-time share of the leaf frames in a py-spy collapsed-stack file."""
    leaves: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        leaves[stack.rsplit(";", 1)[-1]] += int(count)
        total += int(count)
    return [(frame, n / max(total, 1)) for frame, n in leaves.most_common(limit)]


def _syscalls(pid: int) -> tuple[int, int]:
    """(read, write) system calls the process made so far; (0, 0) when unreadable."""
    try:
        fields = dict(
            line.split(": ", 1) for line in Path(f"/proc/{pid}/io").read_text().splitlines()
        )
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
        return 0, 0
    return int(fields.get("syscr", 0)), int(fields.get("syscw", 0))


def main() -> int:
    """Run the load once and print CPU per 1,000 requests per process (JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--py-spy", type=Path, default=None, help="folder for py-spy profiles")
    parser.add_argument(
        "--py-spy-only", default="", help="comma-separated process names to sample (all)"
    )
    parser.add_argument(
        "--request-path",
        choices=("colocated", "separate"),
        default="separate",
        help="classifier, scheduler and router in one process or three",
    )
    args = parser.parse_args()
    # Older commits (A/B runs from a worktree) have no co-located request path.
    colocate: dict[str, Any] = (
        {"colocate_request_path": True} if args.request_path == "colocated" else {}
    )
    spec = StackSpec(
        namespace="prof",
        workers=args.workers,
        regions=("PJM",),
        max_num_seqs=4096,
        extra={"worker": {"backend": "instant"}, "telemetry": {"log_level": "WARNING"}},
        **colocate,
    )
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory(prefix="gs-prof-") as folder:
        stack = start_local_stack(spec, Path(folder))
        try:
            stack.wait_ready()
            pids = {**stack.state.pids, **stack.state.server_pids}
            # Sample the load, not the start-up (the forecaster's fits, imports).
            _wait_quiet(list(pids.values()))
            spies: dict[str, subprocess.Popen[bytes]] = {}
            if args.py_spy is not None and Path(spy).exists():
                args.py_spy.mkdir(parents=True, exist_ok=True)
                # The load generator runs in this process; ptrace scope 0 lets a child sample it.
                for name, pid in {**stack.state.pids, "loadgen": os.getpid()}.items():
                    if args.py_spy_only and name not in args.py_spy_only.split(","):
                        continue
                    spies[name] = subprocess.Popen(
                        [
                            spy,
                            "record",
                            "--pid",
                            str(pid),
                            "--duration",
                            str(int(args.seconds)),
                            "--rate",
                            "200",
                            "--format",
                            "raw",
                            "--nonblocking",
                            "--output",
                            str(args.py_spy / f"{name}.txt"),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
            pids["loadgen"] = os.getpid()
            with _collector_paused():
                before = {name: _cpu_ticks(pid) for name, pid in pids.items()}
                calls_before = {name: _syscalls(pid) for name, pid in pids.items()}
                t0 = time.monotonic()
                with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                    completed, p99 = runner.run(_load(stack, args.rate, args.seconds))
                wall = time.monotonic() - t0
            used = {
                name: (_cpu_ticks(pid) - before[name]) / CLOCK_TICKS for name, pid in pids.items()
            }
            calls = {
                name: tuple(
                    now - then for now, then in zip(_syscalls(pid), calls_before[name], strict=True)
                )
                for name, pid in pids.items()
            }
            for proc in spies.values():
                proc.wait(timeout=60)
        finally:
            stack.stop()
    n = max(completed, 1)
    per_k = {name: round(1000.0 * s / n, 3) for name, s in used.items()}
    report = {
        "rate": args.rate,
        "request_path": args.request_path,
        "completed": completed,
        "p99_added_ms": round(p99, 2),
        "wall_s": round(wall, 2),
        "cpu_s_per_1000_requests": dict(sorted(per_k.items(), key=lambda kv: -kv[1])),
        "cpu_cores": {name: round(s / wall, 3) for name, s in used.items()},
        "total_cpu_ms_per_request": round(
            sum(s for name, s in used.items() if name != "loadgen") * 1000.0 / max(completed, 1),
            3,
        ),
        "syscalls_per_request": {
            name: {
                "read": round(r / max(completed, 1), 2),
                "write": round(w / max(completed, 1), 2),
            }
            for name, (r, w) in sorted(calls.items())
            if r or w
        },
    }
    if args.py_spy is not None:
        report["top_self_frames"] = {
            name: _top_frames(args.py_spy / f"{name}.txt")
            for name in spies
            if (args.py_spy / f"{name}.txt").exists()
        }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
