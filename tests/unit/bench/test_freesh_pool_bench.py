"""``greenserve bench freesh-pool``: every solve of one run uses the run's settings."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from greenserve.bench.freesh_pool import run as freesh_pool
from services.planner.milp import solve_plan
from services.planner.plan_model import Plan
from services.planner.problem import PlannerSettings, PlanningProblem


def test_table3_partition_a_solve_uses_the_runs_alpha(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test that ``--alpha`` reaches Table 3's partition-a solve as well as the day's.

    Table 3 compares episode 0 with partition a alone against both partitions; the second
    comes from the day's carbon run at ``--alpha``, so the first must use it too (FREESH
    Eq. 1b: Σ x·L̄ ≥ α·L̂), or the reported change mixes two safety margins.
    """
    alphas: list[tuple[tuple[str, ...], float]] = []

    def recording(problem: PlanningProblem, settings: PlannerSettings | None = None) -> Plan:
        alphas.append((tuple(sorted(problem.partitions)), problem.alpha))
        return solve_plan(problem, settings)

    monkeypatch.setattr(freesh_pool, "solve_plan", recording)
    args = argparse.Namespace(
        solver="highs", episodes=1, alpha=1.3, traffic_divisor=2.0, time_limit_s=30.0
    )
    out: dict[str, Any] = freesh_pool.run(args)
    assert alphas, "the bench solved nothing"
    assert {alpha for _, alpha in alphas} == {1.3}, alphas
    assert out["alpha"] == 1.3
