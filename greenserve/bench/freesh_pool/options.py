"""Options of ``greenserve bench freesh-pool`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import IntBetween, positive_float
from services.planner.freesh_instance import (
    FREESH_ALPHA,
    FREESH_EPISODES,
    FREESH_TRAFFIC_DIVISOR,
)
from services.planner.problem import Solver

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "freesh-pool"
HELP = "FREESH one-day pool MILP: carbon objective vs MinEnergy (paper: -13.07 % CO2, +1.18 %)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options."""
    parser.add_argument("--solver", choices=[s.value for s in Solver], default=Solver.HIGHS.value)
    parser.add_argument("--episodes", type=IntBetween(1, FREESH_EPISODES), default=FREESH_EPISODES)
    parser.add_argument("--alpha", type=positive_float, default=FREESH_ALPHA)
    parser.add_argument("--traffic-divisor", type=positive_float, default=FREESH_TRAFFIC_DIVISOR)
    parser.add_argument("--time-limit-s", type=positive_float, default=30.0)
