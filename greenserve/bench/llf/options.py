"""Options of ``greenserve bench llf`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_float, positive_int, seed

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "llf"
HELP = "LLF vs EDF/SRTF/FCFS in the FREESH Table 5 setting (violation %, TTFT, Jain)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options (defaults are the FREESH Table 5 setting)."""
    parser.add_argument("--qps", type=positive_float, nargs="+", default=[15.0, 25.0])
    parser.add_argument("--requests", type=positive_int, default=100)
    parser.add_argument("--slots", type=positive_int, default=20)
    parser.add_argument("--tick-s", type=positive_float, default=0.1)
    parser.add_argument("--seed", type=seed, default=42)
    parser.add_argument(
        "--profiles",
        choices=("csv", "repo-sim"),
        default="csv",
        help="TTFT/TBT from freesh/profiles.csv (partition b, m3) or the public simulator's",
    )
    parser.add_argument(
        "--model-prefill",
        action="store_true",
        help="charge TTFT of service before the first token (the FREESH simulator does not)",
    )
