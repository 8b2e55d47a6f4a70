"""Options of ``greenserve bench planner-scale`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_float, positive_int

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "planner-scale"
HELP = "epoch-plan solve time: FREESH instance (goal <= 0.3 s) and DynamoLLM scale (<= 2 s)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options."""
    parser.add_argument(
        "--loads-qps", type=positive_float, nargs="+", default=[100, 200, 300, 400, 500]
    )
    parser.add_argument("--nodes-per-region", type=positive_int, default=40)
    parser.add_argument("--regions", type=positive_int, default=3)
    parser.add_argument("--time-limit-s", type=positive_float, default=10.0)
