"""``greenserve up``: start nats-server, redis-server, every service and N simulated workers."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from greenserve.commands._stack_args import add_stack_arguments, spec_from_args
from greenserve.local import start_local_stack

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "up"
HELP = "start the embedded stack (NATS, Redis, all services, simulated workers)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Stack options plus --foreground."""
    add_stack_arguments(parser)
    parser.add_argument(
        "--foreground", action="store_true", help="stay attached; Ctrl-C stops the stack"
    )


def run(args: argparse.Namespace) -> int:
    """Start the stack and wait until it is ready."""
    stack = start_local_stack(
        spec_from_args(args), args.state_dir, nats_url=args.nats_url, redis_url=args.redis_url
    )
    try:
        stack.wait_ready()
    except RuntimeError as exc:
        print(f"greenserve up failed: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    state = stack.state
    print(
        f"stack up: {state.workers} workers, namespace {state.namespace}, NATS {state.nats_url}, "
        f"Redis {state.redis_url}, speed-up {state.speedup:g}; logs in {args.state_dir / 'logs'}",
        file=sys.stderr,
    )
    if not args.foreground:
        return 0
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    stack.stop()
    return 0
