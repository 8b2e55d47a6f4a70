"""``greenserve status``: processes, registered workers and the current plan."""

from __future__ import annotations

import argparse

from greenserve.commands._stack_args import add_state_dir_argument

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "status"
HELP = "show the embedded stack: processes and their restarts, workers, plan"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """State dir and output format."""
    add_state_dir_argument(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object on stdout, also when no stack runs ({"running": false, '
        '"healthy": false, "error": ...})',
    )
    parser.epilog = (
        "exit status: 0 when a stack runs with every process alive and its Redis readable; 1 "
        "when none is recorded in --state-dir, one of its processes has exited or its Redis "
        "cannot be read (with --json too); 2 for a usage error"
    )


def run(args: argparse.Namespace) -> int:
    """Print the status; 0 when a stack runs with every process alive, else 1."""
    from greenserve.commands._status_report import report_status

    return report_status(args)
