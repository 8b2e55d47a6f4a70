"""Measuring one controller in ``greenserve bench dvfs``: a simulated run of the instance,
and its row of the report (latency percentiles, energy, violations, clocks)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.instance_sim import Arrival, InstanceRun, run_instance
from services.dvfs.controller import ClockController, SloThresholds
from shared.engine import EngineConfig, create_engine
from shared.metrics.latency import e2e_s, latency_stats, mean_tbt_s, ttft_s

__all__ = ["add_savings", "freesh_violations", "run_row", "simulate"]


def simulate(
    config: EngineConfig, arrivals: Sequence[Arrival], controller: ClockController, label: str
) -> InstanceRun:
    """Run ``arrivals`` on one simulated instance under ``controller`` (time on stderr)."""
    began = time.perf_counter()
    result = run_instance(create_engine(config), arrivals, controller)
    print(f"  {label}: {time.perf_counter() - began:.1f} s", file=sys.stderr)
    return result


def _pct(values: np.ndarray[Any, Any], scale: float = 1000.0) -> list[float | None]:
    stats = latency_stats(values)
    return [
        None if math.isnan(v) else round(v * scale, 2) for v in (stats.p50, stats.p90, stats.p99)
    ]


def run_row(run: InstanceRun, violated: np.ndarray[Any, Any]) -> dict[str, Any]:
    """The report's row of one run; ``violated`` marks the requests that missed an SLO."""
    columns = run.columns
    return {
        "e2e_ms": _pct(e2e_s(columns)),
        "ttft_ms": _pct(ttft_s(columns)),
        "tbt_ms": _pct(mean_tbt_s(columns)),
        "mean_tbt_ms": round(float(np.nanmean(mean_tbt_s(columns))) * 1000.0, 2),
        "energy_wh": round(run.energy_j / 3600.0, 3),
        "violation_pct": round(float(violated.mean()) * 100.0, 3),
        "mean_clock_mhz": round(run.mean_clock_mhz, 1),
        "decisions": run.decisions,
        "decide_ms_mean": round(run.decide_cpu_s / max(run.decisions, 1) * 1000.0, 3),
        "duration_s": round(run.duration_s, 1),
    }


def freesh_violations(run: InstanceRun, slo: SloThresholds) -> np.ndarray[Any, Any]:
    """FREESH's violations: late on any of E2E, TTFT or mean TBT, or never completed."""
    c = run.columns
    with np.errstate(invalid="ignore"):
        late = (e2e_s(c) > slo.e2e_s) | (ttft_s(c) > slo.ttft_s) | (mean_tbt_s(c) > slo.tbt_s)
    return np.asarray(late | ~c.completed)


def add_savings(configs: dict[str, dict[str, Any]], baseline: str) -> None:
    """Add each row's ``energy_saving_pct`` against the ``baseline`` row."""
    base = configs[baseline]["energy_wh"]
    for row in configs.values():
        row["energy_saving_pct"] = round((1.0 - row["energy_wh"] / base) * 100.0, 2)
