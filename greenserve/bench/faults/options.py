"""Options of ``greenserve bench faults`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_float, positive_int
from greenserve.fault_scenarios import ALL_SCENARIOS, MULTIHOST_SCENARIOS
from greenserve.multihost.options import add_delays_option

__all__ = ["ALL_SCENARIOS", "HELP", "MULTIHOST_SCENARIOS", "NAME", "OUTAGE_S", "add_arguments"]

NAME = "faults"
HELP = (
    "fault injection (kill -9 each service, restart NATS and Redis, NATS without its store, "
    "Redis down 30 s, drop a worker, kill a NATS cluster node, fail Redis over, crash NATS "
    "for the supervisor to restart) during replays"
)

OUTAGE_S = 30.0
"""Default outage of a ``down:``/``refuse:`` scenario (``greenserve.faults.OUTAGE_S``, checked
equal by a test)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Which scenarios and how much traffic."""
    parser.add_argument(
        "--scenarios",
        default=None,
        help="comma-separated (default: every scenario, or with --multihost "
        f"{','.join(MULTIHOST_SCENARIOS)})",
    )
    parser.add_argument(
        "--multihost",
        action="store_true",
        help="run each scenario on three network-namespace hosts (needs root and iproute2): "
        "the NATS cluster, Redis with Sentinels and the services spread over them; adds "
        "partition:host-<i> (docs/deploy.md, Multi-host on one machine)",
    )
    add_delays_option(parser)
    parser.add_argument(
        "--requests", type=positive_int, default=300, help="trace requests per scenario"
    )
    parser.add_argument("--speedup", type=positive_float, default=10.0)
    parser.add_argument(
        "--outage-s",
        type=positive_float,
        default=OUTAGE_S,
        help="wall seconds a down:/refuse: scenario keeps Redis out (default 30)",
    )
