"""``greenserve bench sim-speed``: wall time of the offline simulator on the 1-h conv trace.

The issue's goal is the 1-hour Azure conversation trace on 96 simulated GPUs in ≤ 30 s wall
on the 2-core development machine. The default policy is SinglePool: every GPU is on and
busy for the whole hour, the simulator's worst case.
"""

from __future__ import annotations

import argparse
from typing import Any

from greenserve.bench.sim_speed.options import HELP, NAME, add_arguments
from loadgen.simulator.cluster import simulate
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.scenario import load_scenario
from loadgen.traces import load_azure_trace, resolve_trace

__all__ = ["HELP", "NAME", "add_arguments", "run"]

GOAL_WALL_S = 30.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Simulate once and report wall time and speed-up over real time."""
    scenario = load_scenario(args.scenario)
    trace = load_azure_trace(resolve_trace(args.trace), duration_s=args.duration)
    result = simulate(scenario, policy_by_name(args.policy), trace)
    return {
        "wall_s": result.wall_s,
        "requests": result.requests,
        "gpus": scenario.total_gpus,
        "sim_speedup": result.sim_speedup,
        "sim_s": result.sim_s,
        "policy": args.policy,
        "completed": result.completed,
        "goal_wall_s": GOAL_WALL_S,
    }
