"""Options of ``greenserve bench bfio`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
from typing import Final

from greenserve.argtypes import (
    non_negative_int,
    non_negative_ints,
    positive_floats,
    positive_int,
)

__all__ = ["HELP", "NAME", "add_arguments"]

NAME: Final = "bfio"
HELP: Final = "BF-IO decode routing vs FCFS: imbalance, throughput, TPOT, energy, decision time"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options."""
    parser.add_argument("--trace", choices=("conv", "code"), default="conv")
    parser.add_argument("--workers", type=positive_int, default=16)
    parser.add_argument("--batch", type=positive_int, default=72)
    parser.add_argument("--steps", type=positive_int, default=4000, help="measured decode steps")
    parser.add_argument("--warmup-steps", type=non_negative_int, default=500)
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument(
        "--reveal-target", type=non_negative_int, default=0, help="pool size; 0 = G*B"
    )
    parser.add_argument("--mode", choices=("disaggregated", "aggregated"), default="disaggregated")
    parser.add_argument("--horizon", type=positive_int, default=80)
    parser.add_argument("--decision-workers", type=positive_int, default=64)
    parser.add_argument("--decision-pool", type=positive_int, default=2000)
    parser.add_argument("--decision-steps", type=positive_int, default=1500)
    parser.add_argument(
        "--decision-repeats", type=positive_int, default=3, help="replays per decision"
    )
    parser.add_argument("--object-trials", type=positive_int, default=200)
    parser.add_argument("--gap-instances", type=positive_int, default=12)
    parser.add_argument(
        "--wait-caps",
        type=positive_floats,
        default="40,60",
        help="waiting budgets (s) for the LLF closure study",
    )
    parser.add_argument(
        "--sweep-horizons",
        type=non_negative_ints,
        default="10,20,40",
        help="extra H values, one seed, with refill (empty: none)",
    )
