"""``greenserve bench cli-help``: how fast the CLI answers ``--help``, in fresh processes.

Each help (``greenserve --help``, every command's, ``bench --help`` and every benchmark's)
runs as a new process, as a user types it, ``--repeats`` times; the median of each is kept,
and the slowest median is held against the goal (1 s on the 2-core development machine).
``python -c pass`` is timed the same way beside them: the part of every figure that is the
interpreter starting, which no change to the CLI can remove.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greenserve.bench import discover
from greenserve.bench.cli_help.options import HELP, NAME, add_arguments

__all__ = ["HELP", "NAME", "add_arguments", "every_help", "launcher", "median_s", "run"]

HELP_TIMEOUT_S = 60.0
"""A help still running after this is a hang, not a slow start: the bench fails."""


def launcher() -> list[str]:
    """The command a user runs: the ``greenserve`` script installed beside this Python, or
    ``python -m greenserve.cli`` where there is none (a source checkout run in place)."""
    script = Path(sys.executable).with_name("greenserve")
    return [str(script)] if script.exists() else [sys.executable, "-m", "greenserve.cli"]


def every_help() -> list[list[str]]:
    """The argument lists of every help the CLI has, top level first."""
    from greenserve.cli import build_parser

    _parser, commands = build_parser()
    helps = [["--help"]]
    helps += [[name, "--help"] for name in sorted(commands)]
    helps += [["bench", name, "--help"] for name in sorted(discover())]
    return helps


def median_s(command: Sequence[str], repeats: int, *, prints: bool = True) -> float:
    """Median wall seconds of ``command`` run ``repeats`` times, each in a fresh process.

    Raises:
        RuntimeError: the command failed, or printed nothing where ``prints`` (a help that
            breaks is not fast).
    """
    times: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        done = subprocess.run(
            list(command), capture_output=True, timeout=HELP_TIMEOUT_S, check=False
        )
        times.append(time.perf_counter() - started)
        if done.returncode != 0 or (prints and not done.stdout.strip()):
            raise RuntimeError(
                f"{' '.join(command)} exited with {done.returncode}: "
                f"{done.stderr.decode(errors='replace').strip()[-300:]}"
            )
    return statistics.median(times)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Time every help and the bare interpreter start; report the worst and the median."""
    base = launcher()
    interpreter_s = median_s([sys.executable, "-c", "pass"], args.repeats, prints=False)
    per_help: dict[str, float] = {}
    for argv in every_help():
        shown = " ".join(["greenserve", *argv])
        per_help[shown] = round(median_s([*base, *argv], args.repeats), 3)
        print(f"{shown}: {per_help[shown]:.3f} s", file=sys.stderr)
    worst = max(per_help, key=lambda name: per_help[name])
    return {
        "goal_s": args.goal_s,
        "goal_met": per_help[worst] < args.goal_s,
        "worst_s": per_help[worst],
        "worst_help": worst,
        "median_s": round(statistics.median(per_help.values()), 3),
        "interpreter_start_s": round(interpreter_s, 3),
        "helps": len(per_help),
        "repeats": args.repeats,
        "launcher": " ".join(base),
        "per_help_s": per_help,
    }
