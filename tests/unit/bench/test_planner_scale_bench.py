"""``greenserve bench planner-scale``: what its DynamoLLM-scale summary reports."""

from __future__ import annotations

import argparse
import dataclasses

from rich.progress import Progress

from greenserve.bench.planner_scale import run as planner_scale
from greenserve.bench.planner_scale.synthetic_profiles import dynamollm_configs
from services.planner.milp import solve_plan
from services.planner.plan_model import PlanStatus
from services.planner.problem import PlannerSettings
from tests.unit.planner.helpers import config, problem


def test_integer_variables_counts_the_models_variables_not_every_profile_row() -> None:
    """Test that ``integer_variables`` is what Eq. 1 has after the SLO filter (Eq. 1e).

    With DynamoLLM's SLOs (TTFT 250/400/2000 ms, TBT 100 ms) 30 of the 189 synthetic rows
    fail, so the model has 159 x per region, not 189 (profile rows × regions).
    """
    args = argparse.Namespace(loads_qps=[20.0], nodes_per_region=2, regions=1, time_limit_s=10.0)
    with Progress(disable=True) as progress:
        out = planner_scale._dynamollm(progress, args)
    assert out["profile_rows"] == len(dynamollm_configs()) == 189
    assert out["integer_variables"] == 159


def test_a_fallback_that_serves_less_is_not_the_co2_yardstick() -> None:
    """Test that a shortfall plan's lower CO2 (it covers less) does not become the best that
    covering plans are measured against; with no covering plan the least CO2 of all is."""
    p = problem(
        [config(qps=1.0)], demand={("a", "SS"): 2.0}, inventory={("r1", "A100"): 8},
        intensity={"r1": 100.0},
    )  # fmt: skip
    covering = solve_plan(p, PlannerSettings())
    assert not covering.is_fallback
    short = dataclasses.replace(
        covering,
        status=PlanStatus.FALLBACK_SHORTFALL,
        costs=dataclasses.replace(covering.costs, co2_kg=covering.costs.co2_kg / 2),
    )
    assert planner_scale.best_covering_co2([covering, short]) == covering.costs.co2_kg
    assert planner_scale.best_covering_co2([short]) == covering.costs.co2_kg / 2
