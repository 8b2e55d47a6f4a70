"""Options of ``greenserve bench sim-speed`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from greenserve.argtypes import positive_float
from greenserve.commands._choices import POLICY_METAVAR, POLICY_NAMES, listed

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "sim-speed"
HELP = "wall seconds of the cluster simulator on the 1-h conversation trace, 96 GPUs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Trace, scenario and policy options."""
    parser.add_argument("--trace", default="conv")
    parser.add_argument("--scenario", type=Path, default=Path("scenarios/three_region.yaml"))
    parser.add_argument("--duration", type=positive_float, default=3600.0)
    parser.add_argument(
        "--policy",
        default="single-pool",
        choices=POLICY_NAMES,
        metavar=POLICY_METAVAR,
        help=listed("policy set to time (default single-pool)", POLICY_NAMES),
    )
