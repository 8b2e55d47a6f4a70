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
whole replayed window: the conversation trace holds requests over 4,096 tokens, which
Llama-2-13B's context would refuse (``too_long``)."""

DEMO_DURATION_S = 420.0
"""Trace seconds replayed: the planner serves with its bootstrap plan (every worker on)
until it has seen one planning step of arrivals (300 s, ``planner.epoch_s`` /
``planner.steps_per_epoch``) completed, then solves its first MILP plan; 420 s leaves the
completions' lag and the solve time, so the demo ends under a plan the planner made."""

NAME = "demo"
HELP = "start the stack, replay 7 min of the Azure conversation trace sped up, report, stop"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Stack and trace options with demo defaults (speed-up 20, 420 s of the trace, two
    models: the report shows each model's completions on its own workers)."""
    add_stack_arguments(parser, speedup=20.0, models=DEMO_MODELS)
    add_replay_arguments(parser, duration_s=DEMO_DURATION_S)


def run(args: argparse.Namespace) -> int:
    """Run the whole demo; the stack is stopped whatever happens."""
    # Imported here, not above: the parser imports this module for --help.
    from redis.exceptions import RedisError
    from rich.console import Console

    from greenserve.commands._replay_run import replay_on_stack, trace_from_args, write_json
    from greenserve.commands._status_report import plan_table, read_plan
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
        # What the planner decided, read before the stack (and its store) goes away.
        try:
            report["plan"] = read_plan(stack.state)
        except (OSError, RedisError) as exc:
            report["plan"] = None
            print(f"greenserve demo: could not read the plan: {exc}", file=sys.stderr)
    finally:
        stack.stop()
    print_report(report)
    plan = report["plan"]
    console = Console(stderr=True)
    if plan is None:
        console.print("plan: none published")
    else:
        console.print(plan_table(plan))
        if plan["objective"] == "bootstrap":
            console.print(
                "the planner was still on its bootstrap plan (a longer --duration gives it "
                "a planning step of arrivals to solve on)"
            )
    write_json(report, args.out)
    return 0 if report["lost"] == 0 else 2
