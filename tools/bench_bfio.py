"""Time BF-IO placement (seed 003) on the live router's shapes: the current code against a baseline.

Usage: ``.venv/bin/python tools/bench_bfio.py [--section placement|lookahead|all]
[--baseline 69e7f5d] [--lookahead-baseline c02f3c3] [--rounds 400] [--json]``

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

The ``lookahead`` section times :func:`~services.router.lookahead.base_trajectories` (with
each side's own snapshot cache, as ``place()`` holds one) and the whole ``place()`` against
``--lookahead-baseline``, on fresh snapshots of G = 2, 4, 8, 16 workers running exactly
0, 4, 64 or 256 sequences each (H = 80, 1-8 candidates, free slots >= candidates). Old and
new alternate call by call; every base must be ``np.array_equal`` (same dtype) and every
placement identical, or the tool stops.
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


def lookahead_round(
    rng: np.random.Generator, count: int, running: int, index: int
) -> tuple[list[Candidate], list[WorkerLoad]]:
    """Return one live decision with exactly ``running`` sequences on every worker."""
    wanted = int(rng.integers(1, 9))
    free = rng.integers(0, 9, count)
    free[int(rng.integers(0, count))] = wanted  # room for every candidate somewhere
    workers = [
        WorkerLoad(
            worker_id=f"w{g}",
            free_slots=int(free[g]),
            running=running,
            kv_tokens=int(rng.integers(300, 3000, running).sum()),
            predicted_remaining=tuple(int(r) for r in rng.geometric(1 / 200, running)),
        )
        for g in range(count)
    ]
    prompts = np.exp(rng.normal(6.5, 1.0, wanted)).clip(8, 8000).astype(int)
    candidates = [
        Candidate(
            request_id=f"r{index}-{i}",
            prompt_tokens=int(p),
            predicted_output_tokens=200,
            laxity_s=-0.1 if rng.random() < 0.05 else float("inf"),
        )
        for i, p in enumerate(prompts)
    ]
    return candidates, workers


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    cpu = time.thread_time_ns()
    out = fn(*args, **kwargs)
    return out, (time.thread_time_ns() - cpu) / 1000.0


def bench_lookahead(old_module: ModuleType, rounds: int, seed: int) -> list[dict[str, Any]]:
    """Time old and new ``base_trajectories`` and ``place`` call by call on fresh snapshots."""
    from services.router.lookahead import SnapshotCache, base_trajectories

    rows = []
    for count in (2, 4, 8, 16):
        for running in (0, 4, 64, 256):
            rng = np.random.default_rng(seed + 100 * count + running)
            work = [lookahead_round(rng, count, running, i) for i in range(rounds)]
            # The baseline bfio module holds its own revision's lookahead functions.
            caches = {"old": old_module.SnapshotCache(), "new": SnapshotCache()}
            functions = {"old": old_module.base_trajectories, "new": base_trajectories}
            placers = {
                "old": old_module.BalanceFuturePlacer(horizon=HORIZON),
                "new": BalanceFuturePlacer(horizon=HORIZON),
            }
            base_us: dict[str, list[float]] = {"old": [], "new": []}
            place_us: dict[str, list[float]] = {"old": [], "new": []}
            for i, (candidates, workers) in enumerate(work):
                order = ["old", "new"] if i % 2 == 0 else ["new", "old"]
                bases, pairs = {}, {}
                for label in order:
                    bases[label], spent = _timed(
                        functions[label], workers, HORIZON, cache=caches[label]
                    )
                    base_us[label].append(spent)
                for label in order:
                    pairs[label], spent = _timed(placers[label].place, candidates, workers)
                    place_us[label].append(spent)
                same = bases["old"].dtype == bases["new"].dtype
                if not (same and np.array_equal(bases["old"], bases["new"])):
                    raise SystemExit(f"bases differ: G={count} running={running} round {i}")
                if pairs["old"] != pairs["new"]:
                    raise SystemExit(f"placements differ: G={count} running={running} round {i}")
            row: dict[str, Any] = {"workers": count, "running": running, "rounds": rounds}
            for name, samples in (("base", base_us), ("place", place_us)):
                for label in ("old", "new"):
                    row[f"{name}_{label}_cpu_us_p50"] = round(statistics.median(samples[label]), 1)
                    row[f"{name}_{label}_cpu_us_mean"] = round(statistics.fmean(samples[label]), 1)
                row[f"{name}_speedup_mean"] = round(
                    row[f"{name}_old_cpu_us_mean"] / row[f"{name}_new_cpu_us_mean"], 2
                )
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print JSON (or a table)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="69e7f5d", help="git revision of the old code")
    parser.add_argument(
        "--lookahead-baseline", default="c02f3c3", help="git revision for the lookahead section"
    )
    parser.add_argument("--section", choices=("placement", "lookahead", "all"), default="all")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"horizon": HORIZON}
    if args.section in ("placement", "all"):
        rows = bench(load_baseline(args.baseline), args.rounds, args.seed)
        report["placement"] = {"baseline": args.baseline, "batch": BATCH, "rows": rows}
        if not args.json:
            for row in rows:
                print(
                    f"{row['scenario']:4s} G={row['workers']:2d} "
                    f"cands={row['mean_candidates']:5.2f} "
                    f"CPU old {row['old_cpu_us_mean']:7.1f} us "
                    f"({row['old_cpu_us_per_candidate']:6.2f}/cand)  "
                    f"new {row['new_cpu_us_mean']:7.1f} us "
                    f"({row['new_cpu_us_per_candidate']:6.2f}/cand)  "
                    f"x{row['cpu_speedup_mean']}"
                )
    if args.section in ("lookahead", "all"):
        old = load_baseline(args.lookahead_baseline)
        rows = bench_lookahead(old, args.rounds, args.seed)
        report["lookahead"] = {"baseline": args.lookahead_baseline, "rows": rows}
        if not args.json:
            for row in rows:
                print(
                    f"lookahead G={row['workers']:2d} running={row['running']:3d} "
                    f"base old {row['base_old_cpu_us_mean']:6.1f} "
                    f"new {row['base_new_cpu_us_mean']:6.1f} us x{row['base_speedup_mean']}  "
                    f"place old {row['place_old_cpu_us_mean']:6.1f} "
                    f"new {row['place_new_cpu_us_mean']:6.1f} us x{row['place_speedup_mean']}"
                )
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
