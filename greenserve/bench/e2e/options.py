"""Options of ``greenserve bench e2e`` (:mod:`greenserve.bench.e2e.run` runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_float, positive_int

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "e2e"
HELP = "replay N conversation-trace requests through every live service; losses and latency"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Size of the run."""
    parser.add_argument(
        "--requests", type=positive_int, default=500, help="requests from the trace start"
    )
    parser.add_argument("--trace", default="conv", help="conv, code or an Azure-format CSV")
    parser.add_argument("--workers", type=positive_int, default=4)
    parser.add_argument("--speedup", type=positive_float, default=10.0)
