"""``greenserve demo``: start the stack, replay minutes of the conversation trace, report, stop."""

from __future__ import annotations

import argparse
import sys

from greenserve.commands._stack_args import (
    add_replay_arguments,
    add_stack_arguments,
    spec_from_args,
)

__all__ = ["DEMO_MODELS", "HELP", "NAME", "add_arguments", "run"]

DEMO_MODELS = "llama-3-8b,qwen3-8b"
"""The demo's stack serves two models, the replay asking for each in turn. Both take the
whole replayed window: its 3 minutes of the conversation trace hold 47 requests over 4,096
tokens, which Llama-2-13B's context would refuse (``too_long``)."""

NAME = "demo"
HELP = "start the stack, replay 3 min of the Azure conversation trace sped up, report, stop"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Stack and trace options with demo defaults (speed-up 20, 180 s of the trace, two
    models: the report shows each model's completions on its own workers)."""
    add_stack_arguments(parser, speedup=20.0, models=DEMO_MODELS)
    add_replay_arguments(parser, duration_s=180.0)


def run(args: argparse.Namespace) -> int:
    """Run the whole demo; the stack is stopped whatever happens."""
    # Imported here, not above: the parser imports this module for --help.
    from greenserve.commands._replay_run import replay_on_stack, trace_from_args, write_json
    from greenserve.local import start_local_stack
    from loadgen.report import print_report

    trace = trace_from_args(args)
    try:
        stack = start_local_stack(
            spec_from_args(args), args.state_dir, nats_url=args.nats_url, redis_url=args.redis_url
        )
    except (ValueError, RuntimeError) as exc:  # e.g. a stack already runs in --state-dir
        print(f"greenserve demo failed: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            stack.wait_ready()
        except (ValueError, RuntimeError) as exc:
            print(f"greenserve demo failed: {exc}", file=sys.stderr)
            return 1
        print(
            f"stack up ({stack.state.workers} workers); replaying {len(trace)} requests "
            f"({args.duration:g} s of trace) at speed-up {stack.state.speedup:g}",
            file=sys.stderr,
        )
        report = replay_on_stack(stack.state, trace, plots=args.plots)
    finally:
        stack.stop()
    print_report(report)
    write_json(report, args.out)
    return 0 if report["lost"] == 0 else 2
