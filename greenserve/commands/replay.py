"""``greenserve replay``: replay a trace onto the running stack and print the report."""

from __future__ import annotations

import argparse
import json
import sys

from greenserve.commands._stack_args import add_replay_arguments, add_state_dir_argument
from greenserve.local import load_state

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "replay"
HELP = "replay an Azure-format or synthetic trace onto the running stack (see `greenserve up`)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Trace options."""
    add_replay_arguments(parser, duration_s=120.0)
    add_state_dir_argument(parser)
    parser.add_argument(
        "--json", action="store_true", help="print the report as JSON on the last line"
    )


def run(args: argparse.Namespace) -> int:
    """Replay and report; the speed-up is the stack's."""
    # Imported here, not above: the parser imports this module for --help.
    from greenserve.commands._replay_run import (
        StackUnreachableError,
        replay_on_stack,
        trace_from_args,
        write_json,
    )
    from loadgen.report import print_report

    try:
        state = load_state(args.state_dir)
    except FileNotFoundError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    trace = trace_from_args(args)
    if not trace:
        print("the chosen trace window holds no requests", file=sys.stderr)
        return 1
    print(f"replaying {len(trace)} requests at speed-up {state.speedup:g}", file=sys.stderr)
    try:
        report = replay_on_stack(state, trace, plots=args.plots)
    except StackUnreachableError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print_report(report)
    write_json(report, args.out)
    if args.json:
        print(json.dumps(report, default=float))
    return 0 if report["lost"] == 0 else 2
