"""Options of ``greenserve bench faults`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import non_negative_floats, positive_float, positive_int
from greenserve.fault_scenarios import ALL_SCENARIOS, MULTIHOST_SCENARIOS

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
    parser.add_argument(
        "--delays-ms",
        type=non_negative_floats,
        default=(),
        metavar="D0,D1,D2",
        help="with --multihost: milliseconds added to what host i sends (tc netem, or a "
        "user-space delay line where the kernel has no netem); the round trip between "
        "hosts i and j is Di + Dj (e.g. 15,25,40 for 40-65 ms between regions)",
    )
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
