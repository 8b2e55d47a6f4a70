"""Options of ``greenserve bench cluster`` (:mod:`greenserve.bench.cluster` runs it).

``greenserve.bench.cluster`` keeps an ``add_arguments`` of its own with the same options
(a test checks that both build the same flags, defaults and choices); this one is what the
CLI builds its parser from, without importing the simulator.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from greenserve.argtypes import positive_float
from greenserve.commands._choices import POLICY_METAVAR, POLICY_NAMES, listed

__all__ = ["DEFAULT_POLICY", "HELP", "NAME", "add_arguments"]

NAME = "cluster"
HELP = "GreenServe vs SinglePool in the offline simulator: energy/CO2 saving at SLO attainment"

DEFAULT_POLICY = "min-energy-split-feedback"
"""The headline set (``greenserve.bench.cluster.DEFAULT_POLICY``, checked equal by a test)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Trace, scenario and policy options."""
    parser.add_argument("--trace", default="conv", help="Azure-format CSV or alias (conv, code)")
    parser.add_argument("--scenario", type=Path, default=Path("scenarios/three_region.yaml"))
    parser.add_argument(
        "--duration", type=positive_float, default=3600.0, help="trace seconds to replay"
    )
    parser.add_argument(
        "--policy",
        default=DEFAULT_POLICY,
        choices=POLICY_NAMES,
        metavar=POLICY_METAVAR,
        help=f"policy set measured (default {DEFAULT_POLICY}); see simulate --help for the list",
    )
    parser.add_argument(
        "--baseline",
        default="single-pool",
        choices=POLICY_NAMES,
        metavar=POLICY_METAVAR,
        help="policy set the savings refer to (default single-pool)",
    )
    parser.add_argument(
        "--option",
        action="append",
        choices=POLICY_NAMES,
        metavar=POLICY_METAVAR,
        help=listed(
            "further policy sets whose energy/SLO trade-off is reported (repeatable)",
            POLICY_NAMES,
        ),
    )
    parser.add_argument("--no-progress", action="store_true")
