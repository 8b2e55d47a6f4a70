"""Options of ``greenserve bench profile-drift`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from greenserve.argtypes import positive_float, positive_int, seed

__all__ = ["DEFAULT_DRIFT_WINDOW", "HELP", "NAME", "add_arguments"]

NAME = "profile-drift"
HELP = "DynamoLLM's instance manager when the served mix changes: swept once vs re-swept on drift"

DEFAULT_DRIFT_WINDOW: Final = 256
"""The agent's own default (``services.dvfs.profile_live.DEFAULT_DRIFT_WINDOW``, checked equal
by a test), written out because importing the agent's module would take numpy into every
``--help``."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Workload, engine and agent settings."""
    parser.add_argument("--gpu", default="A100-80GB")
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--max-num-seqs", type=positive_int, default=64)
    parser.add_argument("--phase-minutes", type=positive_float, default=10.0)
    parser.add_argument(
        "--load-share",
        type=positive_float,
        default=0.6,
        help="each phase's arrival rate as a share of its mix's throughput bound at max clock",
    )
    parser.add_argument("--drift-window", type=positive_int, default=DEFAULT_DRIFT_WINDOW)
    parser.add_argument("--min-requests", type=positive_int, default=64)
    parser.add_argument("--scheme", default="dynamollm9")
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument(
        "--plots", type=Path, default=None, help="write profile_drift.png (clocks, late) here"
    )
