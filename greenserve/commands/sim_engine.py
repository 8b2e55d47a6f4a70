"""``greenserve sim-engine``: serve a simulated GPU behind vLLM's OpenAI-compatible API.

Point the ``vllm`` worker backend (``worker.vllm_url``), the profiler or any OpenAI client
at it. See :mod:`loadgen.sim_server` for the endpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from greenserve.argtypes import port, positive_float, positive_int
from shared.engine import GPUS, MODELS, EngineConfig, create_engine

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "sim-engine"
HELP = "serve the engine model over vLLM's OpenAI-compatible HTTP API (with /metrics and /clock)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Engine, speed-up and listening options."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port, default=8000, help="0 picks a free port")
    parser.add_argument("--gpu", default="A100-80GB", help=f"one of {', '.join(GPUS)}")
    parser.add_argument("--model", default="llama-3-8b", help=f"one of {', '.join(MODELS)}")
    parser.add_argument("--tp", type=positive_int, default=1, choices=(1, 2, 4, 8))
    parser.add_argument(
        "--speedup", type=positive_float, default=1.0, help="model seconds per wall second"
    )
    parser.add_argument("--max-num-seqs", type=positive_int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=positive_int, default=8192)
    parser.add_argument("--clock-mhz", type=positive_float, default=None, help="initial SM clock")
    parser.add_argument(
        "--served-model-name", default=None, help="name clients send (default: --model)"
    )
    parser.add_argument(
        "--legacy-metric-names",
        action="store_true",
        help="publish vllm:gpu_cache_usage_perc (vLLM before the rename) instead of "
        "vllm:kv_cache_usage_perc",
    )


async def _serve(args: argparse.Namespace) -> None:
    # Imported here, not above: aiohttp is most of a --help's start otherwise.
    from loadgen.sim_server import SimEngineServer, start_sim_server

    engine = create_engine(
        EngineConfig(
            gpu=args.gpu,
            model=args.model,
            tp=args.tp,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            clock_mhz=args.clock_mhz,
        )
    )
    server = SimEngineServer(
        engine,
        speedup=args.speedup,
        served_model=args.served_model_name,
        legacy_metric_names=args.legacy_metric_names,
    )
    runner, port = await start_sim_server(server, args.host, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(
        f"sim-engine: {args.model} on {args.tp}x {args.gpu}, speed-up {args.speedup:g}, "
        f"serving {server.served_model!r} at http://{args.host}:{port}",
        file=sys.stderr,
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM."""
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(args))
    except (ValueError, OSError) as exc:
        print(f"greenserve sim-engine: {exc}", file=sys.stderr)
        return 2
    return 0
