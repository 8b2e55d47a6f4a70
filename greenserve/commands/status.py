"""``greenserve status``: processes, registered workers and the current plan."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table

from greenserve.local import DEFAULT_STATE_DIR, StackState, alive, load_state
from proto.codec import DecodeError, decode
from proto.keys import Keys
from proto.messages import Plan, WorkerStats
from shared.store import as_bytes

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "status"
HELP = "show the embedded stack: processes, workers, plan"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """State dir and output format."""
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


async def _read(state: StackState) -> dict[str, Any]:
    from redis.asyncio import Redis

    keys = Keys(state.namespace)
    redis = Redis.from_url(state.redis_url, socket_connect_timeout=2)
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
        raw_plan = await redis.get(keys.plan)
        if raw_plan is not None:
            decoded = decode(as_bytes(raw_plan), Plan)
            plan = {
                "epoch": decoded.epoch,
                "pools": len(decoded.pools),
                "objective": decoded.objective,
            }
    finally:
        await redis.aclose()
    return {"workers": sorted(workers, key=lambda w: str(w["worker_id"])), "plan": plan}


def run(args: argparse.Namespace) -> int:
    """Print the status."""
    try:
        state = load_state(args.state_dir)
    except FileNotFoundError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    processes = {name: alive(pid) for name, pid in {**state.pids, **state.server_pids}.items()}
    try:
        live = asyncio.run(_read(state))
    except (OSError, RedisError) as exc:
        # A stack whose Redis died is what an operator runs status for: say so, no traceback.
        live = {"workers": [], "plan": None, "error": f"redis unreachable: {exc}"}
    cells = [_cell(Path(folder)) for folder in state.cells]
    healthy = all(processes.values()) and all(
        not c.get("missing") and c["running"] == c["processes"] for c in cells
    )
    report = {"namespace": state.namespace, "processes": processes, **live}
    if cells:
        report["cells"] = cells
    if args.json:
        print(json.dumps(report))
        return 0 if healthy else 1
    console = Console()
    table = Table(title=f"GreenServe stack {state.namespace}")
    table.add_column("process")
    table.add_column("state")
    for name, up in processes.items():
        table.add_row(name, "running" if up else "[red]exited[/red]")
    console.print(table)
    workers = Table(title="workers")
    columns = (
        "worker_id",
        "pool",
        "region",
        "running",
        "waiting",
        "clock_mhz",
        "power_w",
        "energy_wh",
    )
    for col in columns:
        workers.add_column(col)
    for w in live["workers"]:
        workers.add_row(*(str(w[c]) for c in columns))
    console.print(workers)
    console.print(f"plan: {live['plan']}")
    if "error" in live:
        console.print(f"[red]{live['error']}[/red]")
    for cell in cells:
        console.print(
            f"cell {cell['namespace']}: {cell['running']}/{cell['processes']} processes "
            f"running; details: greenserve status --state-dir {cell['state_dir']}"
        )
    return 0 if healthy else 1


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
        "running": sum(alive(pid) for pid in pids.values()),
    }
