"""Options of ``greenserve bench predictor`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
from typing import Final

from greenserve.argtypes import fraction, non_negative_float, seed

__all__ = ["HELP", "NAME", "TRACE_FILES", "add_arguments"]

NAME: Final = "predictor"
HELP: Final = "output-length predictors: bucket accuracy and MAE on held-out Azure traces"

TRACE_FILES: Final = {
    "conv": "AzureLLMInferenceTrace_conv.csv",
    "code": "AzureLLMInferenceTrace_code.csv",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options."""
    parser.add_argument(
        "--traces", nargs="+", choices=sorted(TRACE_FILES), default=["conv", "code"]
    )
    parser.add_argument(
        "--held-out-fraction", type=fraction, default=0.5, help="share of each trace scored"
    )
    parser.add_argument(
        "--feedback-lag-s",
        type=non_negative_float,
        default=30.0,
        help="seconds after arrival before a completion's length is learned",
    )
    parser.add_argument("--seed", type=seed, default=0, help="seed of the injected noise")
