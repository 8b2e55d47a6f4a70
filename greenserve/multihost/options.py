"""The command-line option the multi-host benches share: a delay per host."""

from __future__ import annotations

import argparse

from greenserve.argtypes import non_negative_floats

__all__ = ["add_delays_option"]


def add_delays_option(parser: argparse.ArgumentParser) -> None:
    """``--delays-ms D0,D1,D2``: what each host adds to what it sends (with ``--multihost``)."""
    parser.add_argument(
        "--delays-ms",
        type=non_negative_floats,
        default=(),
        metavar="D0,D1,D2",
        help="with --multihost: milliseconds added to what host i sends (tc netem, or a "
        "user-space delay line where the kernel has no netem); the round trip between "
        "hosts i and j is Di + Dj (e.g. 15,25,40 for 40-65 ms between regions)",
    )
