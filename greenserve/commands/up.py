"""``greenserve up``: start nats-server, redis-server, every service and N simulated workers."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from greenserve.commands._stack_args import add_stack_arguments, spec_from_args
from greenserve.local import start_local_stack
from shared.security.secrets import redact_url

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "up"
HELP = "start the embedded stack (NATS, Redis, all services, simulated workers)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Stack options plus --foreground."""
    add_stack_arguments(parser)
    parser.add_argument(
        "--foreground", action="store_true", help="stay attached; Ctrl-C stops the stack"
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="per-service NATS users and Redis ACL users with generated passwords "
        "(in <state-dir>/secrets); replay and status use the loadgen and monitor identities",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="with --secure: TLS on NATS and Redis with a local CA (needs 'cryptography')",
    )


def run(args: argparse.Namespace) -> int:
    """Start the stack and wait until it is ready."""
    try:
        stack = start_local_stack(
            spec_from_args(args),
            args.state_dir,
            nats_url=args.nats_url,
            redis_url=args.redis_url,
            secure=args.secure,
            tls=args.tls,
        )
    except (ValueError, RuntimeError) as exc:
        print(f"greenserve up failed: {exc}", file=sys.stderr)
        return 1
    try:
        stack.wait_ready()
    except RuntimeError as exc:
        print(f"greenserve up failed: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    state = stack.state
    print(
        f"stack up: {state.workers} workers, namespace {state.namespace}, "
        f"NATS {redact_url(state.nats_url)}, Redis {redact_url(state.redis_url)}, "
        f"speed-up {state.speedup:g}; logs in {args.state_dir / 'logs'}",
        file=sys.stderr,
    )
    print(f"OpenAI-compatible API: {state.gateway_url}/v1", file=sys.stderr)
    if state.secure:
        print(
            f"secure: one identity per service; passwords in {args.state_dir / 'secrets'}",
            file=sys.stderr,
        )
    if state.tls_ca_file:
        print(
            f"TLS on: for other tools, export SSL_CERT_FILE={state.tls_ca_file}",
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
