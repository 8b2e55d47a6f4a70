"""Options of ``greenserve bench faults`` (:mod:`greenserve.bench.faults` runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_float, positive_int

__all__ = ["ALL_SCENARIOS", "HELP", "NAME", "add_arguments"]

NAME = "faults"
HELP = (
    "fault injection (kill -9 each service, restart NATS and Redis, drop a worker) during replays"
)

ALL_SCENARIOS = (
    "kill:classifier",
    "kill:scheduler",
    "kill:router",
    "kill:requestpath",
    "kill:planner",
    "kill:forecaster",
    "kill:dvfs-node-pjm",
    "kill:gateway",
    "drop:worker-0",
    "kill:worker-0",
    "term:worker-0",
    "restart:nats",
    "restart:redis",
    "kill:router+drop:worker-0",
    "kill:requestpath+drop:worker-0",
)
"""The scenarios of :mod:`greenserve.faults` (its ``ALL_SCENARIOS``, checked equal by a test),
written out because importing that module would take NATS, Redis and pandas into every
``--help``."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Which scenarios and how much traffic."""
    parser.add_argument("--scenarios", default=",".join(ALL_SCENARIOS), help="comma-separated")
    parser.add_argument(
        "--requests", type=positive_int, default=300, help="trace requests per scenario"
    )
    parser.add_argument("--speedup", type=positive_float, default=10.0)
