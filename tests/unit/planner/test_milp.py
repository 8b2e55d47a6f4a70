"""Tests of the epoch MILP (FREESH Eq. 1 with a clock dimension) on hand-checkable problems."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from services.planner.errors import InfeasiblePlanError
from services.planner.milp import solve_plan
from services.planner.plan_model import Allocation, PlanStatus
from services.planner.problem import Objective, PlannerSettings, Solver, TieBreak
from tests.unit.planner.helpers import config, problem

EXACT = PlannerSettings(mip_rel_gap=1e-9)
SMALL = config(tp=2, power=100.0, qps=1.0)
LARGE = config(tp=4, power=150.0, qps=3.0)


def _counts(allocations: tuple[Allocation, ...]) -> dict[tuple[str, int, float | None], int]:
    return {(a.region, a.tensor_parallel, a.clock_mhz): a.instances for a in allocations}


def test_energy_objective_finds_the_known_cheapest_cover() -> None:
    """Test that 2.5 QPS is served by one 150 W TP4 worker, not three 100 W TP2 workers."""
    p = problem(
        [SMALL, LARGE], demand={("a", "SS"): 2.5}, inventory={("r1", "A100"): 8},
        intensity={"r1": 100.0},
    )  # fmt: skip
    plan = solve_plan(p, PlannerSettings(objective=Objective.ENERGY, mip_rel_gap=1e-9))
    assert plan.status is PlanStatus.OPTIMAL
    assert _counts(plan.allocations) == {("r1", 4, None): 1}
    assert plan.costs.energy_wh == pytest.approx(150.0 * 1800 / 3600)
    assert plan.costs.co2_kg == pytest.approx(150.0 * 1800 * 100.0 / 3.6e9)


def test_carbon_objective_places_workers_in_the_cleanest_region() -> None:
    """Test that the carbon objective puts the worker where λ is lowest."""
    p = problem(
        [LARGE], demand={("a", "SS"): 2.0},
        inventory={("dirty", "A100"): 8, ("clean", "A100"): 8},
        intensity={"dirty": 400.0, "clean": 50.0},
    )  # fmt: skip
    plan = solve_plan(p, EXACT)
    assert _counts(plan.allocations) == {("clean", 4, None): 1}
    assert plan.routing == {"SS": {"clean": 1.0}}


@pytest.mark.parametrize("solver", list(Solver))
def test_both_backends_reach_the_same_optimum(solver: Solver) -> None:
    """Test that HiGHS and CBC return plans of equal cost on the same problem."""
    p = problem(
        [SMALL, LARGE, config(tp=8, power=260.0, qps=7.0)], demand={("a", "SS"): 9.5},
        inventory={("r1", "A100"): 16}, intensity={"r1": 100.0},
    )  # fmt: skip
    plan = solve_plan(p, PlannerSettings(solver=solver, mip_rel_gap=1e-9))
    # Cheapest cover of 9.5 QPS: TP8 + TP4 (410 W); next are 2×TP8 (520 W), TP8 + 3×TP2 (560 W).
    assert plan.costs.energy_wh == pytest.approx(410.0 * 0.5)


def test_infeasible_demand_returns_a_flagged_max_coverage_plan() -> None:
    """Test that demand beyond inventory yields a fallback covering the most it can."""
    p = problem(
        [SMALL, LARGE], demand={("a", "SS"): 10.0}, inventory={("r1", "A100"): 8},
        intensity={"r1": 100.0},
    )  # fmt: skip
    plan = solve_plan(p, EXACT)
    assert plan.status is PlanStatus.FALLBACK_SHORTFALL
    assert plan.is_fallback
    assert _counts(plan.allocations) == {("r1", 4, None): 2}
    assert plan.shortfall_qps == {"SS": pytest.approx(4.0)}


def test_infeasible_demand_raises_when_fallback_is_off() -> None:
    """Test that the fallback can be switched off and then infeasibility is an error."""
    p = problem(
        [SMALL], demand={("a", "SS"): 10.0}, inventory={("r1", "A100"): 2},
        intensity={"r1": 100.0},
    )  # fmt: skip
    with pytest.raises(InfeasiblePlanError):
        solve_plan(p, PlannerSettings(fallback=False))


def test_negative_intensity_fills_the_region_up_to_its_gpus() -> None:
    """Test that λ < 0 makes the carbon objective fill the region (FREESH Table 3)."""
    p = problem(
        [SMALL, LARGE], demand={("a", "SS"): 1.0},
        inventory={("neg", "A100"): 8, ("pos", "A100"): 8},
        intensity={"neg": -200.0, "pos": 300.0},
    )  # fmt: skip
    filled = solve_plan(p, EXACT)
    assert filled.gpus_used() == {("neg", "A100"): 8}
    assert filled.costs.co2_kg < 0
    clamped = solve_plan(p, PlannerSettings(negative_intensity_fill=False, mip_rel_gap=1e-9))
    assert sum(clamped.gpus_used().values()) == 2


def test_only_the_chosen_partition_receives_workers() -> None:
    """Test that the partition binary holds even when negative λ rewards any worker."""
    configs = [
        config(partition="a", power=100.0, qps=1.0),
        config(partition="b", power=100.0, qps=4.0),
        config(partition="b", cls="LL", power=120.0, qps=1.0),
    ]
    p = problem(
        configs, demand={("a", "SS"): 3.0, ("b", "SS"): 3.0, ("b", "LL"): 0.5},
        inventory={("r1", "A100"): 12}, intensity={"r1": -50.0},
    )  # fmt: skip
    plan = solve_plan(p, EXACT)
    assert plan.partition in {"a", "b"}
    assert {a.partition for a in plan.allocations} == {plan.partition}
    assert sum(plan.gpus_used().values()) == 12


def test_slo_violating_configuration_is_never_used() -> None:
    """Test that a cheap configuration breaking the TTFT limit gets no workers."""
    fast_but_late = config(cls="LS", tp=2, power=50.0, qps=5.0, ttft=700.0)
    compliant = config(cls="LS", tp=4, power=400.0, qps=5.0, ttft=500.0)
    p = problem(
        [fast_but_late, compliant], demand={("a", "LS"): 4.0}, inventory={("r1", "A100"): 8},
        intensity={"r1": 100.0},
    )  # fmt: skip
    plan = solve_plan(p, EXACT)
    assert [(a.tensor_parallel, a.instances) for a in plan.allocations] == [(4, 1)]


def test_min_energy_tie_break_sets_the_emissions_of_equal_energy_plans() -> None:
    """Test that MinEnergy's tie-break picks the cleanest or dirtiest of equal-energy plans."""
    p = problem(
        [LARGE], demand={("a", "SS"): 2.0},
        inventory={("dirty", "A100"): 4, ("clean", "A100"): 4},
        intensity={"dirty": 400.0, "clean": 50.0},
    )  # fmt: skip
    best = solve_plan(p, PlannerSettings(objective=Objective.ENERGY, tie_break=TieBreak.MIN_CARBON))
    worst = solve_plan(
        p, PlannerSettings(objective=Objective.ENERGY, tie_break=TieBreak.MAX_CARBON)
    )
    assert best.costs.energy_wh == pytest.approx(worst.costs.energy_wh)
    assert best.gpus_used() == {("clean", "A100"): 4}
    assert worst.gpus_used() == {("dirty", "A100"): 4}


def test_clock_dimension_picks_the_cheapest_clock_per_qps() -> None:
    """Test that among clock levels the plan uses the one with the lowest power per QPS."""
    rows = [
        config(tp=4, clock=800.0, power=150.0, qps=1.0),
        config(tp=4, clock=1400.0, power=200.0, qps=2.0),
        config(tp=4, clock=1980.0, power=400.0, qps=2.5),
    ]
    p = problem(
        rows, demand={("a", "SS"): 4.0}, inventory={("r1", "A100"): 16}, intensity={"r1": 1.0}
    )
    plan = solve_plan(p, EXACT)
    assert _counts(plan.allocations) == {("r1", 4, 1400.0): 2}


def test_one_clock_per_pool_forbids_mixing_clocks() -> None:
    """Test that DynamoLLM's shared pool clock removes a cheaper mixed-clock plan."""
    rows = [
        config(tp=4, clock=1000.0, power=100.0, qps=1.0),
        config(tp=4, clock=1980.0, power=250.0, qps=2.0),
    ]
    p = problem(
        rows, demand={("a", "SS"): 3.0}, inventory={("r1", "A100"): 8}, intensity={"r1": 1.0}
    )
    mixed = solve_plan(p, EXACT)
    assert _counts(mixed.allocations) == {("r1", 4, 1000.0): 1, ("r1", 4, 1980.0): 1}
    single = solve_plan(p, PlannerSettings(single_clock_per_pool=True, mip_rel_gap=1e-9))
    assert _counts(single.allocations) == {("r1", 4, 1980.0): 2}


def test_region_share_limit_caps_a_class_in_one_region() -> None:
    """Test that routing limits split a class across regions and weights sum to one."""
    p = problem(
        [SMALL], demand={("a", "SS"): 4.0},
        inventory={("clean", "A100"): 16, ("dirty", "A100"): 16},
        intensity={"clean": 10.0, "dirty": 500.0},
        region_share_limits={("SS", "clean"): 0.5},
    )  # fmt: skip
    plan = solve_plan(p, EXACT)
    assert plan.routing["SS"] == {"clean": pytest.approx(0.5), "dirty": pytest.approx(0.5)}


def test_exclusive_class_groups_keep_each_pool_to_one_group() -> None:
    """Test that with class groups a (region, GPU type) serves one group, without both."""
    rows = [
        config(cls="SS", gpu="A100", power=100.0, qps=2.0),
        config(cls="LL", gpu="A100", power=100.0, qps=2.0),
        config(cls="SS", gpu="H100", power=150.0, qps=2.0),
        config(cls="LL", gpu="H100", power=150.0, qps=2.0),
    ]
    base = problem(
        rows, demand={("a", "SS"): 1.0, ("a", "LL"): 1.0},
        inventory={("r1", "A100"): 8, ("r1", "H100"): 8}, intensity={"r1": 1.0},
    )  # fmt: skip
    shared = solve_plan(base, EXACT)
    assert {(a.gpu_type, a.request_class) for a in shared.allocations} == {
        ("A100", "SS"), ("A100", "LL"),
    }  # fmt: skip
    grouped = dataclasses.replace(base, class_groups={"SS": "short", "LL": "long"})
    split = solve_plan(grouped, EXACT)
    hosts: dict[str, set[str]] = {}
    for a in split.allocations:
        hosts.setdefault(a.gpu_type, set()).add(a.request_class)
    assert sorted(len(classes) for classes in hosts.values()) == [1, 1]
    assert split.costs.energy_wh == pytest.approx((100.0 + 150.0) * 0.5)


def test_a_highs_solve_leaves_stdout_to_the_caller() -> None:
    """Test that HiGHS's start-up banner goes to stderr, so a bench's --json stays JSON.

    The banner is printed once per process by the first ``Highs`` made, from C, so the
    check runs in a fresh interpreter and reads its real stdout.
    """
    script = "\n".join(
        (
            "from services.planner.milp import solve_plan",
            "from services.planner.problem import PlannerSettings, Solver",
            "from tests.unit.planner.test_milp import LARGE, SMALL, problem",
            "p = problem([SMALL, LARGE], demand={('a', 'SS'): 2.5},",
            "            inventory={('r1', 'A100'): 8}, intensity={'r1': 100.0})",
            "plan = solve_plan(p, PlannerSettings(solver=Solver.HIGHS))",
            "print('plan', plan.status.value)",
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == [f"plan {PlanStatus.OPTIMAL.value}"]
    assert "HiGHS" in done.stderr  # the banner still reaches the operator, on stderr


@pytest.mark.parametrize("solver", list(Solver))
def test_an_empty_model_with_no_demand_is_optimal_with_every_solver(solver: Solver) -> None:
    """Test that with nothing eligible (the one row fails its TTFT limit) and no demand the
    empty plan is optimal, not a greedy fallback: CBC reports no solution for a model
    without columns, so the solver is not asked."""
    p = problem(
        [config(ttft=10_000.0)], demand={("a", "SS"): 0.0}, inventory={("r1", "A100"): 8},
        intensity={"r1": 100.0},
    )  # fmt: skip
    plan = solve_plan(p, PlannerSettings(solver=solver))
    assert plan.status is PlanStatus.OPTIMAL
    assert plan.allocations == ()
