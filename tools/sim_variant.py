"""Run one simulator policy set, with some fields changed, on a trace; print one JSON line.

The experiments behind the default's guard rails (docs/simulator.md, "The default and its
guard rails") are runs of this tool, e.g.::

    python tools/sim_variant.py --trace code --policy default --set feedback_replan=true
    python tools/sim_variant.py --trace code --policy min-energy-modes \\
        --set plan_observed_sizes=true --set 'clock="max"'
    python tools/sim_variant.py --trace conv --window 1800:3600 --policy default
    python tools/sim_variant.py --trace conv --rate 1.5 --window 0:2400 --policy default

``--rate R`` replays the trace R times as fast (every arrival time divided by R; the
window is in the replayed time): the busier conv of docs/simulator.md is ``--rate 1.5``.
``--set FIELD=JSON`` changes a :class:`~loadgen.simulator.policies.PolicySet` field (the
value is JSON: ``true``, ``0.8``, ``"max"``, ``null``); ``--reference-trace FILE`` makes
the planner profile on another trace's lengths than ``conv``'s (a diagnostic: the oracle
of the observed sizes). No baselines are sized: ``greenserve bench cluster`` does that.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    """Parse the options, run the set, print SLO, energy, CO2 and per-class SLO as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", default="conv")
    parser.add_argument("--policy", default="default")
    parser.add_argument("--window", default=None, help="START_S:END_S (default 0:3600)")
    parser.add_argument("--scenario", default="scenarios/three_region.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=JSON")
    parser.add_argument("--rate", type=float, default=1.0, help="replay R times as fast")
    parser.add_argument("--reference-trace", default=None)
    args = parser.parse_args()

    from loadgen.simulator import plan_profiles, planned
    from loadgen.simulator.compare import SimRunner
    from loadgen.simulator.policies import policy_by_name
    from loadgen.simulator.scenario import load_scenario
    from loadgen.traces import TraceRequest, read_azure_trace, resolve_trace
    from services.planner import live_profiles, mixed_profiles
    from shared.domain.classes import scheme_by_name

    changes = {}
    for item in args.set:
        field, _, value = item.partition("=")
        changes[field] = json.loads(value)
    if args.reference_trace:
        trace_file = args.reference_trace

        @functools.lru_cache(maxsize=1)
        def lengths() -> tuple[tuple[int, int], ...]:
            mix = mixed_profiles.trace_mix(scheme_by_name("dynamollm9"), trace_file)
            return tuple((r.prompt, r.output) for r in mix)

        @functools.lru_cache(maxsize=4)
        def mix(scheme: str) -> tuple[mixed_profiles.MixRequest, ...]:
            return mixed_profiles.trace_mix(scheme_by_name(scheme), trace_file)

        # Each module holds its own reference to the functions: replace them all.
        setattr(live_profiles, "reference_lengths", lengths)  # noqa: B010
        setattr(planned, "reference_lengths", lengths)  # noqa: B010
        setattr(plan_profiles, "reference_lengths", lengths)  # noqa: B010
        setattr(plan_profiles, "_trace_mix", mix)  # noqa: B010
    start, end = (0.0, 3600.0)
    if args.window:
        start, end = (float(v) for v in args.window.split(":"))
    scenario = load_scenario(args.scenario)
    if args.rate <= 0:
        parser.error("--rate must be positive")
    loaded = read_azure_trace(resolve_trace(args.trace), start_s=0.0, duration_s=end * args.rate)
    requests = [
        TraceRequest(t_s=r.t_s / args.rate, prompt_tokens=r.prompt_tokens,
                     output_tokens=r.output_tokens)
        for r in loaded.requests
    ]  # fmt: skip
    runner = SimRunner(scenario, measure_from_s=start, show_progress=False)
    policy = policy_by_name(args.policy, **changes)
    began = time.time()
    result = runner.run(policy, requests)
    summary = result.summary
    print(
        json.dumps(
            {
                "trace": args.trace,
                "window_s": [start, end],
                "rate": args.rate,
                "policy": args.policy,
                "set": changes,
                "reference_trace": args.reference_trace,
                "slo_attainment_pct": round(100 * summary.overall.slo_attainment, 2),
                "energy_wh": round(result.energy_j / 3600, 1),
                "co2_kg": round(result.co2_kg, 3),
                "max_gpus": result.max_gpus,
                "wall_s": round(time.time() - began),
                "per_class_slo_pct": {
                    c: round(100 * v.slo_attainment, 1) for c, v in summary.per_class.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
