"""Time BF-IO placement (seed 003) on the live router's shapes: the current code against a baseline.

Usage: ``.venv/bin/python tools/bench_bfio.py [--baseline 69e7f5d] [--rounds 400] [--json]``

The live router pulls at most as many requests as there are free slots, so nearly every
decision takes BF-IO's small-pool path (every candidate admitted, each placed on the worker
with the least marginal objective). This tool times :meth:`BalanceFuturePlacer.place` on
fresh ``WorkerLoad`` snapshots as the registry builds them (per-sequence predicted
remaining tokens, no per-sequence KV) for G = 2, 4, 8, 16 workers, H = 80:

* ``live``: 1-8 candidates, free slots >= candidates, 5 % of candidates urgent;
* ``fill``: 6-16 candidates for 2-5 free slots (the fill-to-targets path).

The baseline is the same two modules (``services/router/bfio.py`` and ``lookahead.py``)
read from a git revision and loaded beside the current ones, so both run in one process on
the same rounds, interleaved round by round (the order alternates). Every round's
placements must be identical, or the tool stops. It prints microseconds per call (median,
mean) and per candidate (total time / total candidates) for both, and their ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from services.router.bfio import BalanceFuturePlacer
from services.router.placement import Candidate, WorkerLoad

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
BATCH = 64
HORIZON = 80


def load_baseline(rev: str) -> ModuleType:
    """Return ``services.router.bfio`` as of ``rev``, bound to that revision's lookahead."""
    tmp = Path(tempfile.mkdtemp(prefix="bfio-baseline-"))
    modules: dict[str, ModuleType] = {}
    for name in ("lookahead", "bfio"):
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:services/router/{name}.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        path = tmp / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"_baseline_{name}", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # The old bfio imports ``services.router.lookahead`` by name: point that name at the
        # old lookahead while the old bfio executes, then restore the current one.
        saved = sys.modules.get("services.router.lookahead")
        if name == "bfio":
            sys.modules["services.router.lookahead"] = modules["lookahead"]
        try:
            spec.loader.exec_module(module)
        finally:
            if saved is not None:
                sys.modules["services.router.lookahead"] = saved
        modules[name] = module
    return modules["bfio"]


def make_round(
    rng: np.random.Generator, count: int, fill: bool, index: int
) -> tuple[list[Candidate], list[WorkerLoad]]:
    """Return one decision's candidates and fresh worker snapshots."""
    workers = []
    free_total = 0
    for g in range(count):
        running = int(rng.integers(BATCH // 4, BATCH))
        if fill:
            running = BATCH - int(rng.integers(0, 2))
        remaining = tuple(int(r) for r in rng.geometric(1 / 200, running))
        kv = int(rng.integers(300, 3000, running).sum())
        free = BATCH - running
        free_total += free
        workers.append(
            WorkerLoad(
                worker_id=f"w{g}",
                free_slots=free,
                running=running,
                kv_tokens=kv,
                predicted_remaining=remaining,
            )
        )
    if fill:
        if free_total == 0:
            workers[0].free_slots = 2
            free_total = 2
        wanted = free_total + int(rng.integers(4, 12))
    else:
        wanted = int(rng.integers(1, 9))
    prompts = np.exp(rng.normal(6.5, 1.0, wanted)).clip(8, 8000).astype(int)
    urgent = rng.random(wanted) < 0.05
    candidates = [
        Candidate(
            request_id=f"r{index}-{i}",
            prompt_tokens=int(p),
            predicted_output_tokens=200,
            laxity_s=-0.1 if u else float("inf"),
        )
        for i, (p, u) in enumerate(zip(prompts, urgent, strict=True))
    ]
    return candidates, workers


def bench(old_module: ModuleType, rounds: int, seed: int) -> list[dict[str, Any]]:
    """Time old and new ``place`` on the same rounds; return one row per (G, scenario)."""
    rows = []
    for scenario in ("live", "fill"):
        for count in (2, 4, 8, 16):
            rng = np.random.default_rng(seed + count)
            work = [make_round(rng, count, scenario == "fill", i) for i in range(rounds)]
            old = old_module.BalanceFuturePlacer(horizon=HORIZON)
            new = BalanceFuturePlacer(horizon=HORIZON)
            times: dict[str, list[float]] = {"old": [], "new": []}
            walls: dict[str, list[float]] = {"old": [], "new": []}
            for i, (candidates, workers) in enumerate(work):
                order = [("old", old), ("new", new)]
                if i % 2:
                    order.reverse()
                results = {}
                for label, placer in order:
                    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
                    results[label] = placer.place(candidates, workers)
                    times[label].append((time.thread_time_ns() - cpu) / 1000.0)
                    walls[label].append((time.perf_counter_ns() - wall) / 1000.0)
                if results["old"] != results["new"]:
                    raise SystemExit(f"placements differ: G={count} {scenario} round {i}")
            total_candidates = sum(len(c) for c, _ in work)
            row: dict[str, Any] = {
                "scenario": scenario,
                "workers": count,
                "rounds": rounds,
                "mean_candidates": round(total_candidates / rounds, 2),
            }
            for label in ("old", "new"):
                row[f"{label}_cpu_us_p50"] = round(statistics.median(times[label]), 1)
                row[f"{label}_cpu_us_mean"] = round(statistics.fmean(times[label]), 1)
                row[f"{label}_cpu_us_per_candidate"] = round(
                    sum(times[label]) / total_candidates, 2
                )
                row[f"{label}_wall_us_p50"] = round(statistics.median(walls[label]), 1)
            row["cpu_speedup_mean"] = round(row["old_cpu_us_mean"] / row["new_cpu_us_mean"], 2)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print JSON (or a table)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="69e7f5d", help="git revision of the old code")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = bench(load_baseline(args.baseline), args.rounds, args.seed)
    report = {"baseline": args.baseline, "horizon": HORIZON, "batch": BATCH, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for row in rows:
            print(
                f"{row['scenario']:4s} G={row['workers']:2d} cands={row['mean_candidates']:5.2f} "
                f"CPU old {row['old_cpu_us_mean']:7.1f} us "
                f"({row['old_cpu_us_per_candidate']:6.2f}/cand)  "
                f"new {row['new_cpu_us_mean']:7.1f} us "
                f"({row['new_cpu_us_per_candidate']:6.2f}/cand)  "
                f"x{row['cpu_speedup_mean']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
