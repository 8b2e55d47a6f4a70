"""``greenserve bench <name>``: run one benchmark and print its result."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from greenserve.bench import discover
from greenserve.commands import add_subcommand

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "bench"
HELP = "run a benchmark; with --json the last stdout line is its result as one JSON object"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one sub-parser per benchmark module."""
    sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for name, bench in sorted(discover().items()):
        bench_parser = add_subcommand(sub, name, bench.help)
        bench_parser.add_argument(
            "--json", action="store_true", help="print the result as JSON on the last line"
        )
        bench.add_arguments(bench_parser)


def _print_human(result: dict[str, Any]) -> None:
    width = max((len(k) for k in result), default=0)
    for key, value in result.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else value
        print(f"{key:<{width}}  {shown}")


def run(args: argparse.Namespace) -> int:
    """Run the chosen benchmark; JSON goes to stdout, progress to stderr."""
    # Imported before the clock starts, so that bench_wall_s times the run alone.
    work = discover()[args.bench].load()
    started = time.perf_counter()
    result: dict[str, Any] = work.run(args)
    result.setdefault("bench", args.bench)
    result.setdefault("bench_wall_s", round(time.perf_counter() - started, 3))
    if args.json:
        sys.stdout.write(json.dumps(result, default=float) + "\n")
    else:
        _print_human(result)
    return 0
