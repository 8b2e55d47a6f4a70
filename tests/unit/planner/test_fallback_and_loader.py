"""Tests of the greedy fallback, the FREESH loader and profile CSVs with a clock column."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from greenserve.bench.planner_scale.synthetic_profiles import dynamollm_configs
from services.planner.fallback import greedy_plan
from services.planner.freesh_instance import (
    episode_problem,
    load_freesh,
    load_profiles_csv,
    write_profiles_csv,
)
from services.planner.milp import solve_plan
from services.planner.problem import PlannerSettings
from services.planner.slo_filter import eligible_configs
from shared.paths import data_path
from tests.unit.planner.helpers import config, problem


def test_greedy_fallback_stays_within_inventory_and_covers_what_it_can() -> None:
    """Test that the solver-free plan never exceeds GPUs and prefers cheap capacity."""
    cheap = config(tp=4, power=100.0, qps=3.0)
    dear = config(tp=2, power=200.0, qps=1.0)
    p = problem(
        [cheap, dear], demand={("a", "SS"): 20.0}, inventory={("r1", "A100"): 10},
        intensity={"r1": 100.0},
    )  # fmt: skip
    partition, counts = greedy_plan(p, p.configs, PlannerSettings())
    assert partition == "a"
    assert counts == {("r1", cheap): 2, ("r1", dear): 1}


def test_freesh_loader_reads_the_instance_and_divides_traffic() -> None:
    """Test that the loader sees 32 profiles, 288 steps, 3 locations and traffic ÷ β."""
    with data_path("freesh", "forecast_qps_partition_a.csv").open() as handle:
        first_ls = float(next(csv.DictReader(handle))["LS"])
    instance = load_freesh(traffic_divisor=2.0)
    assert len(instance.configs) == 32
    assert instance.steps == 288
    assert instance.regions == ("loc1", "loc2", "loc3")
    assert instance.demand_qps[("a", "LS")][0] == pytest.approx(first_ls / 2.0)
    assert instance.inventory[("loc2", "A100")] == 12
    assert all(c.clock_mhz is None for c in instance.configs)


def test_freesh_slo_filter_drops_only_the_616_ms_ttft_row() -> None:
    """Test that FREESH's filters remove exactly b-LS-m2 (TTFT 616 ms > 600 ms)."""
    problem_0 = episode_problem(load_freesh(), 0)
    _, rejected = eligible_configs(problem_0.configs, problem_0.slo)
    assert [(v.config.partition, v.config.request_class, v.config.mode) for v in rejected] == [
        ("b", "LS", "m2")
    ]


def test_partition_a_alone_is_infeasible_in_episode_32_but_both_are_not() -> None:
    """Test that the repo's infeasible episode needs partition b to be served."""
    instance = load_freesh()
    exact = PlannerSettings(mip_rel_gap=1e-6)
    only_a = solve_plan(episode_problem(instance, 32, partitions=("a",)), exact)
    both = solve_plan(episode_problem(instance, 32), exact)
    assert only_a.is_fallback
    assert set(only_a.shortfall_qps) == {"LS"}
    assert not both.is_fallback


def test_profiles_csv_with_clock_column_round_trips(tmp_path: Path) -> None:
    """Test that generated rows written with clock_mhz load back unchanged."""
    rows = dynamollm_configs()
    path = tmp_path / "profiles.csv"
    write_profiles_csv(path, rows)
    assert load_profiles_csv(path) == rows
    assert len(rows) == 9 * 3 * 7
