"""Replay a trace onto a running stack and report (used by replay, demo and bench e2e)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from greenserve.commands._input_errors import reading
from greenserve.local import StackState
from loadgen.plots import plot_replay
from loadgen.replay import replay
from loadgen.report import build_report
from loadgen.traces import TraceRequest, load_azure_trace, resolve_trace, synthetic_trace
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.clock import ModelClock
from shared.config import ClockSettings, NatsSettings
from shared.security.secrets import redact_url

__all__ = ["CONNECT_TIMEOUT_S", "StackUnreachableError", "replay_on_stack", "trace_from_args"]

CONNECT_TIMEOUT_S = 10.0
"""How long a replay waits for the stack's NATS at the start (the services themselves retry
forever; a client started against a stopped stack should say so instead)."""


class StackUnreachableError(RuntimeError):
    """The stack's NATS did not answer when the replay started."""


def trace_from_args(args: argparse.Namespace) -> list[TraceRequest]:
    """The requests chosen by the replay options."""
    if args.synthetic_rate is not None:
        trace = synthetic_trace(
            rate_rps=args.synthetic_rate, duration_s=args.duration or 60.0, cv=args.cv
        )
    else:
        path = resolve_trace(args.trace)
        with reading(path):
            trace = load_azure_trace(path, start_s=args.start, duration_s=args.duration)
    return trace[: args.max_requests] if args.max_requests is not None else trace


def replay_on_stack(
    state: StackState,
    trace: list[TraceRequest],
    *,
    progress: bool = True,
    plots: Path | None = None,
) -> dict[str, Any]:
    """Replay ``trace`` at the stack's speed-up; return the report (and plot it if asked)."""

    async def run() -> dict[str, Any]:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                nc = await connect_nats(NatsSettings(url=state.nats_url), "greenserve-replay")
        except TimeoutError:
            raise StackUnreachableError(
                f"the stack's NATS ({redact_url(state.nats_url)}) did not answer within "
                f"{CONNECT_TIMEOUT_S:g} s; is the stack up? (greenserve status)"
            ) from None
        try:
            with Progress(
                TextColumn("replay"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                disable=not progress,
                transient=False,
            ) as bar:
                task = bar.add_task("replay", total=len(trace))
                result = await replay(
                    nc,
                    Subjects(state.namespace),
                    trace,
                    model=state.served_models,
                    speedup=state.speedup,
                    on_progress=lambda done, _total: bar.update(task, completed=done),
                )
        finally:
            await nc.close()
        clock = ModelClock(state.speedup, state.origin_wall_s, ClockSettings().origin_model_s)
        report = build_report(result, clock)
        if plots is not None:
            report["plots"] = [str(p) for p in plot_replay(result, plots)]
        return report

    return asyncio.run(run())


def write_json(report: dict[str, Any], path: Path | None) -> None:
    """Write the report as JSON when a path is given."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=float))
