"""``greenserve bench engine-speed``: how fast the simulated engine steps.

Measures iterations per second of three ways to drive the engine, interleaved in one process
so that a noisy shared machine affects them alike:

- ``reference``: ``step()`` on the per-sequence reference scheduler (the engine before the
  fast path; ``create_engine(..., reference=True)``), the baseline;
- ``step``: ``step()`` on the default engine (decoding sequences advanced as one group);
- ``step_many``: runs of pure-decode iterations fast-forwarded by ``step_many``.

Workloads: 256 sequences decoding (nobody finishes while timed), and a saturated mixed
stream (Poisson arrivals above capacity: admissions, chunked prefill and finishes every few
iterations). From the iteration rate it estimates how much faster than real time a 96-GPU
cluster simulation runs: each instance must simulate ``1 / iteration_duration`` iterations
per simulated second, so ``n`` busy instances run ``iterations_per_s · mean_duration / n``
times faster than real time.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from greenserve.bench.engine_speed.options import HELP, NAME, add_arguments
from shared.engine import EngineConfig, EngineRequest, SimulatedEngine, create_engine

__all__ = ["HELP", "NAME", "add_arguments", "run"]

_CLUSTER_GPUS = 96
_MODES = ("reference", "step", "step_many")


def _decoding_engine(
    config: EngineConfig, running: int, iterations: int, mode: str
) -> SimulatedEngine:
    engine = create_engine(config, reference=mode == "reference")
    for i in range(running):
        # Outputs long enough that nobody finishes while timed; staggered prompts spread KV.
        engine.add(EngineRequest(request_id=f"r{i}", prompt_tokens=64 + i % 256,
                                 output_tokens=iterations + 64))  # fmt: skip
    for _ in range(10 * running):  # admission and prefill; bounded in case KV is too small
        if not engine.num_waiting and engine.num_running == running:
            return engine
        engine.step()
    raise RuntimeError(f"{config.model} on {config.gpu} cannot hold {running} sequences")


def _time_decoding(engine: SimulatedEngine, iterations: int, mode: str) -> tuple[float, float]:
    start_engine = engine.now_s
    start = time.perf_counter()
    if mode == "step_many":
        done = 0
        while done < iterations:
            batch = engine.step_many(iterations - done)
            assert batch is not None
            done += batch.iterations
    else:
        for _ in range(iterations):
            engine.step()
    wall = time.perf_counter() - start
    return iterations / wall, (engine.now_s - start_engine) / iterations


def _time_mixed(config: EngineConfig, requests: int, mode: str, seed: int) -> tuple[float, int]:
    """Replay a saturating Poisson stream the way a simulator drives an engine."""
    rng = random.Random(seed)
    engine = create_engine(config, reference=mode == "reference")
    arrivals, now = [], 0.0
    for _ in range(requests):
        now += rng.expovariate(40.0)
        arrivals.append((now, rng.randint(50, 2000), rng.randint(10, 600)))
    iterations = 0
    start = time.perf_counter()
    for index, (arrival, prompt, output) in enumerate(arrivals):
        while engine.has_work and engine.now_s < arrival:
            if mode == "step_many":
                batch = engine.step_many(10_000, arrival)
                assert batch is not None
                iterations += batch.iterations
            else:
                engine.step()
                iterations += 1
        engine.idle_until(arrival)
        engine.add(EngineRequest(request_id=str(index), prompt_tokens=prompt,
                                 output_tokens=output, arrival_s=arrival))  # fmt: skip
    while engine.has_work:  # drain: the tail is mostly pure decode
        batch = engine.step_many(10_000) if mode == "step_many" else None
        iterations += batch.iterations if batch is not None else int(engine.step() is not None)
    return iterations / (time.perf_counter() - start), iterations


def _decode_run(
    config: EngineConfig, running: int, iterations: int, mode: str
) -> tuple[float, float]:
    return _time_decoding(_decoding_engine(config, running, iterations, mode), iterations, mode)


def _best_of(repeats: int, measure: Callable[[], tuple[float, Any]]) -> tuple[float, Any]:
    """Best rate of ``repeats`` runs: the least disturbed by other processes on the machine."""
    return max((measure() for _ in range(repeats)), key=lambda pair: pair[0])


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Time the three driving modes and return iterations per second and cluster speed-ups."""
    setups = {
        "llama-3-8b/H100/TP1": (EngineConfig(gpu="H100-80GB", model="llama-3-8b", tp=1), 1),
        "llama-3-70b/H100/TP4": (EngineConfig(gpu="H100-80GB", model="llama-3-70b", tp=4), 4),
        "llama-3-8b/A100/TP1": (EngineConfig(gpu="A100-80GB", model="llama-3-8b", tp=1), 1),
    }
    by_setup: dict[str, Any] = {}
    for name, (config, gpus) in setups.items():
        instances = _CLUSTER_GPUS // gpus
        decoding: dict[str, Any] = {}
        for mode in _MODES:  # each mode gets a fresh engine in the same state
            ips, duration = _best_of(
                args.repeats, partial(_decode_run, config, args.running, args.iterations, mode)
            )
            decoding[mode] = {
                "iterations_per_s": round(ips),
                "cluster_faster_than_real_time": round(ips * duration / instances, 1),
            }
        decoding["engine_iteration_ms"] = round(duration * 1e3, 2)
        by_setup[name] = {"instances_in_96_gpus": instances, "decoding": decoding}
        rates = ", ".join(f"{m} {decoding[m]['iterations_per_s']:,} it/s" for m in _MODES)
        print(f"{name} decoding {args.running}: {rates}", file=sys.stderr)
    head_config = setups["llama-3-8b/H100/TP1"][0]
    mixed: dict[str, Any] = {}
    for mode in _MODES:
        ips, iterations = _best_of(
            args.repeats, partial(_time_mixed, head_config, args.mixed_requests, mode, 1)
        )
        mixed[mode] = {"iterations_per_s": round(ips), "iterations": iterations}
    rates = ", ".join(f"{m} {mixed[m]['iterations_per_s']:,} it/s" for m in _MODES)
    print(f"llama-3-8b/H100/TP1 mixed: {rates}", file=sys.stderr)
    head = by_setup["llama-3-8b/H100/TP1"]["decoding"]
    worst = {m: min(v["decoding"][m]["cluster_faster_than_real_time"] for v in by_setup.values())
             for m in _MODES}  # fmt: skip
    return {
        "iterations_per_s": head["step"]["iterations_per_s"],
        "reference_iterations_per_s": head["reference"]["iterations_per_s"],
        "step_many_iterations_per_s": head["step_many"]["iterations_per_s"],
        "speedup_vs_reference": round(
            head["step"]["iterations_per_s"] / head["reference"]["iterations_per_s"], 1
        ),
        "running_sequences": args.running,
        "cluster_gpus": _CLUSTER_GPUS,
        "cluster_faster_than_real_time": worst["step"],
        "cluster_faster_than_real_time_by_mode": worst,
        "mixed_llama-3-8b/H100/TP1": mixed,
        "by_setup": by_setup,
        "note": "decoding: every instance decoding a full batch at all times (worst case), "
        "engine only (a simulator adds its own per-token work); mixed: saturating Poisson "
        "stream with admissions, chunked prefill and a finish every few iterations; all "
        "modes give bit-identical iterations (tests/unit/engine/test_fast_path.py)",
    }
