"""``greenserve down``: stop everything ``greenserve up`` started."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from greenserve.local import DEFAULT_STATE_DIR, stop_state

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "down"
HELP = "stop the embedded stack started by `greenserve up`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the stack's state is."""
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)


def run(args: argparse.Namespace) -> int:
    """Stop services (graceful drain), then the servers."""
    try:
        stopped = stop_state(args.state_dir)
    except FileNotFoundError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"stopped {len(stopped)} processes", file=sys.stderr)
    return 0
