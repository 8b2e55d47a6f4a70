"""Options of ``greenserve bench engine-clock`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from greenserve.argtypes import positive_int

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "engine-clock"
HELP = "Engine energy vs SM clock beside DynamoLLM Tables I-III and throttLL'eM's A100 points."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Seeds and the trace the class lengths come from."""
    # A validated count: a bare int let --seeds 0 through to an empty mean.
    parser.add_argument("--seeds", type=positive_int, default=5, help="runs per cell (paper: 5)")
    parser.add_argument(
        "--trace", default="conv", help="Azure-format CSV or alias the class lengths come from"
    )
    # The default (None) is sweeps.DYNAMOLLM_STACK, resolved by the bench so that
    # building the parser stays light; the other stack's Table I summary is reported too.
    parser.add_argument(
        "--stack",
        default=None,
        choices=("splitwise", "vllm"),
        help="serving-stack host overheads for DynamoLLM's tables (default: splitwise, "
        "the pre-v0.6 vLLM era DynamoLLM measured)",
    )
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        help="write engine_clock_table_i.png and engine_clock_throttllem.png here",
    )
