"""``greenserve down``: stop everything ``greenserve up`` started, answering what it held.

The services stop first (a graceful drain), then every request still waiting in the
ingress stream or in Redis is answered ``unavailable`` (:mod:`greenserve.leftovers`), then
the servers stop. With no stack running, ``down`` says so and succeeds: stopping what is
stopped is done.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from greenserve.local import DEFAULT_STATE_DIR, STATE_FILE

if TYPE_CHECKING:
    from greenserve.local import StackState

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "down"
HELP = "stop the embedded stack started by `greenserve up`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the stack's state is."""
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)


def run(args: argparse.Namespace) -> int:
    """Stop services (graceful drain), answer what they left, then stop the servers."""
    if not (args.state_dir / STATE_FILE).exists():
        print(f"no stack running (nothing recorded in {args.state_dir})", file=sys.stderr)
        return 0
    from greenserve.local import stop_state

    stopped = stop_state(args.state_dir, before_servers=_answer_leftovers)
    if not stopped:
        print("no stack running (its processes had ended; state file removed)", file=sys.stderr)
        return 0
    print(f"stopped {len(stopped)} processes", file=sys.stderr)
    return 0


def _answer_leftovers(state: StackState) -> None:
    """Answer the requests the stopped services left in the stream and in Redis."""
    # Imported here: it brings NATS, Redis and aiohttp, which `--help` must not load.
    from greenserve.leftovers import answer_leftovers

    outcome = asyncio.run(answer_leftovers(state))
    if outcome.answered:
        print(
            f"answered {len(outcome.answered)} waiting requests 'unavailable' ({state.namespace})",
            file=sys.stderr,
        )
    if outcome.unanswered:
        print(
            f"could not answer {outcome.unanswered} waiting requests ({state.namespace})",
            file=sys.stderr,
        )
    if outcome.error:
        print(
            f"stopped answering waiting requests ({state.namespace}): {outcome.error}",
            file=sys.stderr,
        )
