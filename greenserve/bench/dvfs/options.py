"""Options of ``greenserve bench dvfs`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from greenserve.argtypes import non_negative_float, positive_float, seed

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "dvfs"
HELP = "MIAD, predictive and profile clock control vs max clock (FREESH Table 10, throttLL'eM)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options (defaults are the papers' settings)."""
    parser.add_argument("--gpu", default="A100-80GB")
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--freesh-minutes", type=positive_float, default=20.0)
    parser.add_argument("--throttllem-minutes", type=positive_float, default=60.0)
    parser.add_argument(
        "--calibration-minutes",
        type=positive_float,
        default=None,
        help="trace minutes used by the max-load ramp (default: --throttllem-minutes)",
    )
    parser.add_argument(
        "--calibration",
        default="poisson",
        choices=("trace", "poisson"),
        help="max-load ramp on constant-rate Poisson arrivals (default: MLPerf server "
        "scenario, as throttLL'eM profiles its SLO) or on the compressed trace itself "
        "(the SLO is then max clock's own p99 on this trace, so any added miss breaks it)",
    )
    parser.add_argument(
        "--miad-aggregation", default="max", choices=("max", "p99", "p90", "p50", "mean")
    )
    parser.add_argument(
        "--length-error-p95",
        type=non_negative_float,
        default=0.0,
        help="predictor error for predictive control (0: oracle lengths)",
    )
    parser.add_argument("--period-s", type=positive_float, default=1.0)
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument(
        "--plots", type=Path, default=None, help="write dvfs.png (saving vs late, clocks) here"
    )
