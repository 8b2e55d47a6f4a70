"""Options of ``greenserve bench engine-speed`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_int

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "engine-speed"
HELP = "Iterations per second of the simulated engine at 256 running sequences; cluster speed-up."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options."""
    parser.add_argument("--iterations", type=positive_int, default=1000, help="iterations to time")
    parser.add_argument("--running", type=positive_int, default=256, help="sequences decoding")
    parser.add_argument("--repeats", type=positive_int, default=3, help="best of this many runs")
    parser.add_argument(
        "--mixed-requests", type=positive_int, default=1500, help="requests in the mixed stream"
    )
