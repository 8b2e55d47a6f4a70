"""``greenserve bench e2e``: requests of the conversation trace through the whole live stack.

Starts embedded NATS and Redis and every service as its own process, replays the first N
requests of the Azure conversation trace at a speed-up, and reports completions, losses,
latency percentiles (model time) and the dispatch overhead (wall time from the ingress
publish to the worker accepting the request: the control plane's own cost).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from greenserve.bench.e2e.options import HELP, NAME, add_arguments
from greenserve.commands._replay_run import replay_on_stack
from greenserve.local import start_local_stack
from greenserve.stack import StackSpec
from loadgen.traces import load_azure_trace, resolve_trace

__all__ = ["HELP", "NAME", "add_arguments", "run"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start a stack, replay, stop; return the report's headline numbers."""
    trace = load_azure_trace(resolve_trace(args.trace), max_requests=args.requests)
    spec = StackSpec(
        namespace="bench",
        workers=args.workers,
        regions=("PJM", "CISO", "BPAT"),
        speedup=args.speedup,
    )
    with tempfile.TemporaryDirectory(prefix="gs-e2e-") as folder:
        stack = start_local_stack(spec, Path(folder))
        try:
            stack.wait_ready()
            report = replay_on_stack(stack.state, trace, progress=False)
        finally:
            stack.stop()
    report.pop("per_class", None)
    report["trace"] = args.trace
    report["workers"] = args.workers
    return report
