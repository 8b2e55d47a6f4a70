"""Options of ``greenserve bench engine-accuracy`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "engine-accuracy"
HELP = "Simulated GPU engine error on held-out calibration points (Vidur, Splitwise, ML.ENERGY)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options."""
    parser.add_argument(
        "--split",
        choices=("test", "train"),
        default="test",
        help="which calibration split to report on (default: the held-out test split)",
    )
