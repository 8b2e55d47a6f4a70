"""``greenserve simulate``: run policy sets over a trace on a simulated cluster and compare."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from greenserve.argtypes import non_negative_float, positive_float
from greenserve.commands._choices import POLICY_METAVAR, POLICY_NAMES, listed

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "simulate"
HELP = "offline cluster simulation of policy sets over a trace (table, JSON, PNG plots)"

DEFAULT_SCENARIO = Path("scenarios/three_region.yaml")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Scenario, trace, policies and output options."""
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO, help="scenario YAML")
    parser.add_argument("--trace", default="conv", help="Azure-format CSV, or an alias: conv, code")
    parser.add_argument(
        "--policy",
        action="append",
        choices=POLICY_NAMES,
        metavar=POLICY_METAVAR,
        help=listed("policy set to run (repeatable; default: the scenario's list)", POLICY_NAMES),
    )
    parser.add_argument("--baseline", default="single-pool", help="policy the savings refer to")
    parser.add_argument(
        "--start", type=non_negative_float, default=0.0, help="trace window start (s)"
    )
    parser.add_argument(
        "--duration", type=positive_float, default=None, help="trace window length (s)"
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for report.json and PNGs")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Simulate, print the comparison, write JSON and plots; 0 when every request ended."""
    # Imported here, not above: the simulator, numpy and pandas are not needed for --help.
    from greenserve.commands._input_errors import reading
    from loadgen.simulator.carbon import check_zones
    from loadgen.simulator.compare import run_policies
    from loadgen.simulator.report import comparison, print_table, write_json
    from loadgen.simulator.scenario import load_scenario
    from loadgen.traces import load_azure_trace, resolve_trace

    with reading(args.scenario):
        scenario = load_scenario(args.scenario)
    try:
        check_zones([region.carbon for region in scenario.regions])
    except ValueError as exc:
        print(f"{args.scenario}: {exc}", file=sys.stderr)
        return 2
    trace_path = resolve_trace(args.trace)
    with reading(trace_path):
        trace = load_azure_trace(trace_path, start_s=args.start, duration_s=args.duration)
    if not trace:
        print("the chosen trace window holds no requests", file=sys.stderr)
        return 1
    policies = args.policy or scenario.policies
    results = run_policies(scenario, trace, policies, show_progress=not args.no_progress)
    report = comparison(results, args.baseline)
    report["scenario"] = scenario.name
    report["trace"] = str(args.trace)
    print_table(report)
    if args.out is not None:
        report_with_series = dict(report)
        report_with_series["series"] = {r.policy: r.as_dict(series=True)["series"] for r in results}
        write_json(report_with_series, args.out / "report.json")
        written = [args.out / "report.json"]
        if not args.no_plots:
            from loadgen.simulator.plots import plot_results

            written += plot_results(results, args.out)
        print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    lost = sum(r.requests - r.completed - r.rejected for r in results)
    return 0 if lost == 0 else 2
