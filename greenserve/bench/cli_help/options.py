"""Options of ``greenserve bench cli-help`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_float, positive_int

__all__ = ["GOAL_S", "HELP", "NAME", "add_arguments"]

NAME = "cli-help"
HELP = "seconds to answer `greenserve --help` and every command's and benchmark's --help"

GOAL_S = 1.0
"""The issue's goal (issue 32): every help answers in under a second on this machine."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Repeats and goal."""
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=3,
        help="fresh processes per help; the median is reported (default 3)",
    )
    parser.add_argument(
        "--goal-s",
        type=positive_float,
        default=GOAL_S,
        help="the slowest help must answer within this (default %(default)s s)",
    )
