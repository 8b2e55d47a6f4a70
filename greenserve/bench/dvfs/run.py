"""``greenserve bench dvfs``: MIAD, predictive and profile clock control against max clock.

One simulated instance (Llama3-8B, one A100-80GB, TP1) runs as a pure discrete loop
(:func:`loadgen.instance_sim.run_instance`) in two settings:

- **FREESH Table 10** (seed 000 §5.7, §7.2 C): 20 min of SS requests, FREESH Table 7
  thresholds, fixed 1410 MHz against MIAD at the four (M, δ) of Table 10, plus predictive
  control with the same SLOs (TBT 150 ms, E2E 7 s). Paper: (2.0, 100 MHz) saves 51.9 %.
- **throttLL'eM** (seed 002 §5–6): the Azure conversation trace with its own lengths,
  compressed to the engine's max load; the max load and the E2E SLO are found as the paper
  does, by ramping the load at max clock (MLPerf-style limits: p99 TTFT ≤ 2 s, p99 TBT ≤
  200 ms), with E2E SLO = p99 E2E at that load. Paper: −24.7 % energy on average.

The IPS model of predictive control is trained on the engine's own profiler data at first
use (kept in memory for the process). The engine's clock model is fitted, not measured
(``docs/engine.md``), so absolute savings depend on it; see ``docs/dvfs.md``.

This module is the command; the bench's parts, beside it, are ``scenarios`` (the two
settings: workloads, SLOs, the max-load ramp), ``workloads`` (the arrivals), ``controllers`` (the
controllers compared and the fitted IPS model), ``measure`` (one simulated run and its report
row), ``report`` (notes and summary), ``paper`` (the published figures) and ``plots``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from greenserve.bench.dvfs.controllers import trained_ips_model
from greenserve.bench.dvfs.options import HELP, NAME, add_arguments
from greenserve.bench.dvfs.plots import plot_dvfs
from greenserve.bench.dvfs.report import build_report
from greenserve.bench.dvfs.scenarios import freesh_setting, throttllem_setting
from shared.engine import EngineConfig

__all__ = ["HELP", "NAME", "add_arguments", "run", "trained_ips_model"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run both settings and return the report (papers' figures beside ours)."""
    config = EngineConfig(gpu=args.gpu, model=args.model)
    print("training the IPS model on engine profiler data", file=sys.stderr)
    model, prefill, accuracy = trained_ips_model(args.gpu, args.model)
    margin = max(float(accuracy["90_10"]["time_error_p95"]), 0.0)
    freesh = freesh_setting(args, config, model, prefill, margin)
    throttllem = throttllem_setting(args, config, model, prefill, margin)
    report = build_report(args.gpu, args.model, accuracy, freesh, throttllem, margin)
    if args.plots is not None:
        report["plots"] = [str(plot_dvfs(report, args.plots / "dvfs.png"))]
    return report
