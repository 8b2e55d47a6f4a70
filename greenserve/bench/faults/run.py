"""``greenserve bench faults``: kill or restart every part during a replay; count what is lost."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from greenserve.argtypes import UsageError
from greenserve.bench.faults.options import HELP, NAME, add_arguments
from greenserve.faults import ALL_SCENARIOS, MULTIHOST_SCENARIOS, ScenarioResult, run_scenario
from greenserve.faults.scenario_names import MULTIHOST_HOSTS
from greenserve.multihost.fabric import delay_method
from loadgen.traces import load_azure_trace, resolve_trace

__all__ = ["HELP", "NAME", "add_arguments", "run"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every scenario on its own fresh stack."""
    if args.delays_ms and not args.multihost:
        raise UsageError("--delays-ms needs --multihost")
    if len(args.delays_ms) > MULTIHOST_HOSTS:
        raise UsageError(f"--delays-ms names {MULTIHOST_HOSTS} hosts at most")
    trace = load_azure_trace(resolve_trace("conv"), max_requests=args.requests)
    results = []
    default = MULTIHOST_SCENARIOS if args.multihost else ALL_SCENARIOS
    scenarios = args.scenarios.split(",") if args.scenarios else list(default)
    for scenario in scenarios:
        print(f"fault scenario {scenario} ...", file=sys.stderr, flush=True)
        outcome = run_scenario(
            scenario,
            trace,
            speedup=args.speedup,
            outage_s=args.outage_s,
            multihost=args.multihost,
            delays_ms=args.delays_ms,
        )
        print(f"  {outcome.as_dict()}", file=sys.stderr, flush=True)
        results.append(outcome)
    recoveries = [r.recovery_s for r in results if r.recovery_s is not None]
    return {
        "scenarios": [r.scenario for r in results],
        "multihost": args.multihost,
        "delays_ms": list(args.delays_ms),
        "delay_by": delay_method(args.delays_ms),
        "requests": sum(r.requests for r in results),
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "failed": sum(r.failed for r in results),
        "leftover_records": sum(r.leftover_records for r in results),
        "max_recovery_s": max(recoveries) if recoveries else None,
        "unrecovered": [r.scenario for r in results if r.recovery_s is None],
        "per_scenario": _by_name(results),
        "goal": {"lost": 0, "duplicated": 0, "max_recovery_s": 5.0, "leftover_records": 0},
    }


def _by_name(results: list[ScenarioResult]) -> dict[str, dict[str, Any]]:
    """Each run under its scenario's name; a repeated scenario's later runs as ``name#2`` …"""
    named: dict[str, dict[str, Any]] = {}
    for result in results:
        key, n = result.scenario, 1
        while key in named:
            n += 1
            key = f"{result.scenario}#{n}"
        named[key] = result.as_dict()
    return named
