"""The simulator's report: a side-by-side terminal table and a JSON document.

Savings are relative to a named baseline policy (SinglePool by default): energy and CO2
saving = 1 − policy / baseline.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from loadgen.simulator.results import SimResult

__all__ = ["comparison", "print_table", "write_json"]


def _saving(value: float, baseline: float) -> float | None:
    return 100.0 * (1.0 - value / baseline) if baseline > 0 else None


def comparison(results: Sequence[SimResult], baseline: str) -> dict[str, Any]:
    """Per-policy dicts plus savings against ``baseline`` (when it ran)."""
    base = next((r for r in results if r.policy == baseline), None)
    out: dict[str, Any] = {"baseline": baseline if base else None, "policies": {}}
    for result in results:
        row = result.as_dict()
        if base is not None:
            row["energy_saving_pct"] = _saving(result.energy_j, base.energy_j)
            row["co2_saving_pct"] = _saving(result.co2_kg, base.co2_kg)
        out["policies"][result.policy] = row
    return out


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(report: dict[str, Any], console: Console | None = None) -> None:
    """Print one column per policy, one row per metric."""
    console = console or Console(stderr=True)
    policies: dict[str, dict[str, Any]] = report["policies"]
    table = Table(title=f"simulated policies (savings vs {report['baseline'] or '-'})")
    table.add_column("metric")
    for name in policies:
        table.add_column(name, justify="right")

    def row(label: str, key: str, digits: int = 2, scale: float = 1.0) -> None:
        cells = []
        for p in policies.values():
            value = p.get(key)
            cells.append(_fmt(None if value is None else value * scale, digits))
        table.add_row(label, *cells)

    def latency(label: str, metric: str, stat: str) -> None:
        cells = []
        for p in policies.values():
            value = p["summary"]["overall"][metric].get(stat)
            cells.append(_fmt(None if value is None else value * 1000.0, 0))
        table.add_row(label, *cells)

    row("requests", "requests", 0)
    row("completed", "completed", 0)
    row("rejected", "rejected", 0)
    row("energy (Wh)", "energy_wh", 0)
    row("energy saving (%)", "energy_saving_pct", 1)
    row("CO2 (kg)", "co2_kg", 3)
    row("CO2 saving (%)", "co2_saving_pct", 1)
    row("avg power (W)", "avg_power_w", 0)
    row("GPU-hours", "gpu_hours", 1)
    row("tokens / J", "tokens_per_joule", 3)
    row("SLO attainment (%)", "slo_attainment", 2, 100.0)
    row("violation rate (%)", "violation_rate", 2, 100.0)
    row("Jain (Eq. 9)", "jain", 3)
    for metric in ("ttft_s", "tbt_s", "e2e_s"):
        for stat in ("p50", "p99"):
            latency(f"{metric[:-2].upper()} {stat} (ms)", metric, stat)
    table.add_row("clock policy", *[str(p["clock"]) for p in policies.values()])
    row("wall (s)", "wall_s", 1)
    row("sim speed-up (×)", "sim_speedup", 0)
    console.print(table)


def write_json(report: dict[str, Any], path: Path) -> None:
    """Write the report as indented JSON (NaN written as null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(report), indent=2), encoding="utf-8")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and value != value:  # NaN
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
