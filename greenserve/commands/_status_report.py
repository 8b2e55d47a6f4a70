"""What ``greenserve status`` reads from a stack's state file and Redis, and how it prints it.

Kept apart from :mod:`greenserve.commands.status` so that the CLI's parser, which imports
every command module, does not import Redis, rich and the wire protocol for ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from greenserve.local import StackState, alive, load_state
from proto.codec import DecodeError, decode
from proto.keys import Keys
from proto.messages import Plan, WorkerStats
from shared.store import as_bytes

__all__ = ["plan_summary", "plan_table", "print_report", "read_plan", "report_status"]


async def _read(state: StackState) -> dict[str, Any]:
    keys = Keys(state.namespace)
    redis = state.redis_client()
    workers: list[dict[str, Any]] = []
    plan: dict[str, Any] | None = None
    try:
        async for key in redis.scan_iter(match=keys.worker_pattern):
            raw = await redis.get(key)
            if raw is None:
                continue
            try:
                stats = decode(as_bytes(raw), WorkerStats)
            except DecodeError:
                continue
            workers.append(
                {
                    "worker_id": stats.worker_id,
                    "pool": stats.pool_id,
                    "region": stats.region,
                    "running": stats.running,
                    "waiting": stats.waiting,
                    "clock_mhz": stats.clock_mhz,
                    "power_w": round(stats.power_w, 1),
                    "energy_wh": round(stats.energy_j / 3600.0, 3),
                }
            )
        plan = await _plan(redis, keys)
    finally:
        await redis.aclose()
    return {"workers": sorted(workers, key=lambda w: str(w["worker_id"])), "plan": plan}


async def _plan(redis: Redis, keys: Keys) -> dict[str, Any] | None:
    raw_plan = await redis.get(keys.plan)
    return None if raw_plan is None else plan_summary(decode(as_bytes(raw_plan), Plan))


def plan_summary(plan: Plan) -> dict[str, Any]:
    """The plan in force as an operator reads it: its epoch, objective (``bootstrap``
    until the planner has a step of demand history, then the MILP's), status, and each
    pool it gives instances with their clock cap (``None``: the dvfs agent's own choice)."""
    return {
        "epoch": plan.epoch,
        "objective": plan.objective,
        "status": plan.status,
        "pools": [
            {
                "pool": p.pool_id,
                "model": p.model,
                "gpu": f"{p.gpu} TP{p.tp}",
                "instances": p.instances,
                "clock_cap_mhz": p.clock_mhz,
                "classes": ", ".join(p.classes) or "*",
            }
            for p in sorted(plan.pools, key=lambda p: p.pool_id)
            if p.instances > 0
        ],
    }


def read_plan(state: StackState) -> dict[str, Any] | None:
    """The plan in force on a running stack (:func:`plan_summary`), ``None`` when the
    planner has published none yet."""

    async def read() -> dict[str, Any] | None:
        redis = state.redis_client()
        try:
            return await _plan(redis, Keys(state.namespace))
        finally:
            await redis.aclose()

    return asyncio.run(read())


def plan_table(plan: dict[str, Any]) -> Table:
    """A :func:`plan_summary` as a terminal table, one row per pool with instances."""
    title = f"plan epoch {plan['epoch']}: {plan['objective']} ({plan['status']})"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    longest = max((len(p["pool"]) for p in plan["pools"]), default=4)
    for header in ("pool", "model", "GPU", "inst", "clock cap", "classes"):
        # Folded, never cut: a pool id or class list cut to "ciso-h…" names nothing; the
        # pool id, the row's name, keeps its whole width.
        table.add_column(
            header,
            justify="right" if header == "inst" else "left",
            overflow="fold",
            min_width=longest if header == "pool" else None,
            no_wrap=header != "classes",
        )
    for pool in plan["pools"]:
        cap = pool["clock_cap_mhz"]
        table.add_row(
            pool["pool"],
            pool["model"] or "any",
            pool["gpu"],
            str(pool["instances"]),
            "dvfs agent" if cap is None else f"{cap:.0f} MHz",
            pool["classes"],
        )
    return table


def report_status(args: argparse.Namespace) -> int:
    """Print the status; 0 when a stack runs with every process alive, else 1."""
    try:
        state = load_state(args.state_dir)
    except FileNotFoundError as exc:
        if args.json:
            # A script that asked for JSON parses stdout whatever the answer; the exit status
            # stays 1 ("no healthy stack"), as for a stack whose processes exited.
            report = {
                "running": False,
                "healthy": False,
                "state_dir": str(args.state_dir),
                "error": str(exc),
            }
            print(json.dumps(report))
        else:
            print(str(exc), file=sys.stderr)
        return 1
    processes = {
        name: alive(pid, state) for name, pid in {**state.pids, **state.server_pids}.items()
    }
    try:
        live = asyncio.run(_read(state))
    except (OSError, RedisError) as exc:
        # A stack whose Redis died is what an operator runs status for: say so, no traceback.
        live = {"workers": [], "plan": None, "error": f"redis unreachable: {exc}"}
    cells = [_cell(Path(folder)) for folder in state.cells]
    # A stack whose Redis cannot be read has lost its recovery log and its plan: alive
    # processes alone do not make it healthy.
    healthy = (
        all(processes.values())
        and "error" not in live
        and all(not c.get("missing") and c["running"] == c["processes"] for c in cells)
    )
    report = {
        "running": any(processes.values()),
        "healthy": healthy,
        "namespace": state.namespace,
        "processes": processes,
        # Times the supervisor started each process again; a crash loop shows here.
        "restarts": {name: state.restarts.get(name, 0) for name in processes},
        "supervised": state.supervisor_pid is not None and alive(state.supervisor_pid, state),
        # Where Prometheus scrapes each service, and the file-SD file that lists them.
        "metrics": state.metrics,
        "metrics_targets_file": state.metrics_targets_file,
        **live,
    }
    if cells:
        report["cells"] = cells
    if args.json:
        print(json.dumps(report))
    else:
        print_report(Console(), report)
    return 0 if healthy else 1


_WORKER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("worker_id", "worker"),
    ("pool", "pool"),
    ("region", "region"),
    ("running", "run"),
    ("waiting", "wait"),
    ("clock_mhz", "clock\nMHz"),
    ("power_w", "power\nW"),
    ("energy_wh", "energy\nWh"),
)
"""Report key and header of each workers column; headers are short, with the unit on a
second line, so that eight columns fit 80 characters with the ids whole."""

_TEXT_COLUMNS = frozenset({"worker_id", "pool", "region"})

_DROPPED_WHEN_NARROW = ("region", "energy_wh", "power_w", "waiting")
"""Left out, in this order, while the table is wider than the terminal: the region is
usually in the pool's name (``pjm-a100``), the energy is a running total, and the power and
queue matter less than which worker runs what at which clock; ``--json`` keeps them all."""


def _workers_table(workers: list[dict[str, Any]], console: Console) -> Table:
    keys = [key for key, _ in _WORKER_COLUMNS]
    for dropped in (None, *_DROPPED_WHEN_NARROW):
        if dropped is not None:
            keys.remove(dropped)
        table = _table_of(workers, keys)
        # The width the table wants, not the one it would be squeezed into.
        wanted = Measurement.get(console, console.options.update_width(10_000), table).maximum
        if wanted <= console.width:
            break
    return table


def _table_of(workers: list[dict[str, Any]], keys: list[str]) -> Table:
    headers = dict(_WORKER_COLUMNS)
    table = Table(title="workers", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for key in keys:
        if key == "worker_id":
            # The id is what an operator greps the logs for: whole on one line while the
            # terminal holds it, the other columns giving way first.
            table.add_column(headers[key], no_wrap=True, min_width=_longest(workers, key))
        elif key in _TEXT_COLUMNS:
            # Broken over lines when the terminal is too narrow, rather than cut to "pj…".
            table.add_column(
                headers[key], overflow="fold", min_width=min(_longest(workers, key), 8)
            )
        else:
            table.add_column(headers[key], justify="right", no_wrap=True)
    for worker in workers:
        table.add_row(*(_shown(key, worker[key]) for key in keys))
    return table


def _longest(workers: list[dict[str, Any]], key: str) -> int:
    return max((len(str(w[key])) for w in workers), default=0)


def _shown(key: str, value: Any) -> str:
    if key == "clock_mhz" and isinstance(value, float):
        return f"{value:.0f}"
    return str(value)


def print_report(console: Console, report: dict[str, Any]) -> None:
    """Render a status report (as ``run`` builds it) as tables for a terminal."""
    table = Table(title=f"GreenServe stack {report['namespace']}")
    table.add_column("process", no_wrap=True)
    table.add_column("state")
    table.add_column("restarts", justify="right")
    metrics = report.get("metrics", {})
    if metrics:
        table.add_column("metrics", overflow="fold")
    restarts = report.get("restarts", {})
    for name, up in report["processes"].items():
        shown = str(restarts[name]) if name in restarts else ""
        row = [name, "running" if up else "[red]exited[/red]", shown]
        table.add_row(*row, *([metrics.get(name, "")] if metrics else []))
    console.print(table)
    if report.get("metrics_targets_file"):
        console.print(f"Prometheus file_sd_configs targets: {report['metrics_targets_file']}")
    if not report.get("supervised", False):
        console.print("supervisor: not running (a service or server that exits stays down)")
    console.print(_workers_table(report["workers"], console))
    plan = report.get("plan")
    console.print(plan_table(plan) if plan else "plan: none published yet")
    if "error" in report:
        console.print(f"[red]{report['error']}[/red]")
    for cell in report.get("cells", []):
        console.print(
            f"cell {cell['namespace']}: {cell['running']}/{cell['processes']} processes "
            f"running; details: greenserve status --state-dir {cell['state_dir']}"
        )


def _cell(folder: Path) -> dict[str, Any]:
    """A further cell's namespace and how many of its processes run (``missing``: its state
    file is gone, so it is not running as part of this stack)."""
    try:
        cell = load_state(folder)
    except FileNotFoundError:
        return {
            "namespace": "?",
            "state_dir": str(folder),
            "processes": 0,
            "running": 0,
            "missing": True,
        }
    pids = {**cell.pids, **cell.server_pids}
    return {
        "namespace": cell.namespace,
        "state_dir": str(folder),
        "processes": len(pids),
        "running": sum(alive(pid, cell) for pid in pids.values()),
    }
