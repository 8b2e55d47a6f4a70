"""Options of ``greenserve bench engine-real`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "engine-real"
HELP = "engine model vs prefill/decode iterations measured on a real H100 (NVML, read-only)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Measurement files or a fresh measurement."""
    parser.add_argument(
        "--measured",
        type=Path,
        action="append",
        help="probe JSON to compare (repeatable; default: the shipped H100 runs)",
    )
    parser.add_argument(
        "--measure",
        action="store_true",
        help="run shared.gpu.decoder_probe here first (PyTorch + CUDA + nvidia-ml-py)",
    )
    parser.add_argument("--compile", action="store_true", help="with --measure: fused layers")
    parser.add_argument("--save", type=Path, help="with --measure: also write the probe JSON")
    parser.add_argument("--plots", type=Path, help="write predicted-vs-measured PNGs here")
