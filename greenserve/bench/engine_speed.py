"""``greenserve bench engine-speed``: how fast the simulated engine steps.

Measures ``step()`` throughput with 256 sequences decoding, then estimates how much faster
than real time a 96-GPU cluster simulation runs: each instance must simulate
``1 / iteration_duration`` iterations per simulated second, so a cluster of ``n`` busy
instances runs ``iterations_per_s · mean_duration / n`` times faster than real time.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from shared.engine import EngineConfig, EngineRequest, create_engine

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "engine-speed"
HELP = "Iterations per second of the simulated engine at 256 running sequences; cluster speed-up."

_CLUSTER_GPUS = 96


def _measure(config: EngineConfig, running: int, iterations: int) -> tuple[float, float]:
    engine = create_engine(config)
    for i in range(running):
        # Outputs long enough that nobody finishes while timed; staggered prompts spread KV.
        engine.add(EngineRequest(request_id=f"r{i}", prompt_tokens=64 + i % 256,
                                 output_tokens=iterations + 64))  # fmt: skip
    for _ in range(10 * running):  # admission and prefill; bounded in case KV is too small
        if not engine.num_waiting and engine.num_running == running:
            break
        engine.step()
    else:
        raise RuntimeError(f"{config.model} on {config.gpu} cannot hold {running} sequences")
    start_engine = engine.now_s
    start = time.perf_counter()
    for _ in range(iterations):
        engine.step()
    wall = time.perf_counter() - start
    return iterations / wall, (engine.now_s - start_engine) / iterations


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options."""
    parser.add_argument("--iterations", type=int, default=1000, help="iterations to time")
    parser.add_argument("--running", type=int, default=256, help="sequences decoding")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Time ``step()`` and return iterations per second and the cluster speed-up."""
    setups = {
        "llama-3-8b/H100/TP1": (EngineConfig(gpu="H100-80GB", model="llama-3-8b", tp=1), 1),
        "llama-3-70b/H100/TP4": (EngineConfig(gpu="H100-80GB", model="llama-3-70b", tp=4), 4),
        "llama-3-8b/A100/TP1": (EngineConfig(gpu="A100-80GB", model="llama-3-8b", tp=1), 1),
    }
    by_setup: dict[str, Any] = {}
    for name, (config, gpus) in setups.items():
        ips, duration = _measure(config, args.running, args.iterations)
        instances = _CLUSTER_GPUS // gpus
        speedup = ips * duration / instances
        by_setup[name] = {
            "iterations_per_s": round(ips),
            "engine_iteration_ms": round(duration * 1e3, 2),
            "instances_in_96_gpus": instances,
            "cluster_faster_than_real_time": round(speedup, 1),
        }
        print(f"{name}: {ips:,.0f} it/s, {duration * 1e3:.1f} ms/it engine time, 96 GPUs "
              f"= {instances} instances → {speedup:.1f}x real time", file=sys.stderr)  # fmt: skip
    head = by_setup["llama-3-8b/H100/TP1"]
    return {
        "iterations_per_s": head["iterations_per_s"],
        "running_sequences": args.running,
        "cluster_gpus": _CLUSTER_GPUS,
        "cluster_faster_than_real_time": min(
            v["cluster_faster_than_real_time"] for v in by_setup.values()
        ),
        "by_setup": by_setup,
        "note": "every instance decoding a full batch at all times (worst case); "
        "idle instances cost nothing but an idle_until call",
    }
