"""The greedy fallback keeps the MILP's rules that protect SLOs (the live planner serves it)."""

from __future__ import annotations

import dataclasses

from services.planner.fallback import greedy_plan
from services.planner.problem import PlannerSettings, PlanningProblem

from .helpers import config, problem

LONG_IN = config(cls="LL", tp=2, qps=1.0)
SHORT = config(cls="SS", tp=2, qps=1.0)


def _two_classes_two_regions(groups: dict[str, str]) -> PlanningProblem:
    """LL and SS demand that both fit the cheaper of two regions."""
    p = problem(
        [LONG_IN, SHORT],
        demand={("a", "LL"): 2.0, ("a", "SS"): 1.0},
        inventory={("cheap", "A100"): 16, ("dear", "A100"): 16},
        intensity={"cheap": 100.0, "dear": 500.0},
    )
    return dataclasses.replace(p, class_groups=groups)


def test_exclusive_class_groups_never_share_a_region_and_gpu_type() -> None:
    """Test that long-input and short classes go to different (region, GPU type) pools
    when both fit the cheaper region: the MILP allows one group per pool."""
    p = _two_classes_two_regions({"LL": "long", "SS": "short"})
    _, counts = greedy_plan(p, p.configs, PlannerSettings())
    assert counts == {("cheap", LONG_IN): 2, ("dear", SHORT): 1}


def test_without_groups_both_classes_take_the_cheaper_region() -> None:
    p = _two_classes_two_regions({})
    _, counts = greedy_plan(p, p.configs, PlannerSettings())
    assert counts == {("cheap", LONG_IN): 2, ("cheap", SHORT): 1}


def test_a_region_share_caps_the_cheap_region_and_the_rest_goes_elsewhere() -> None:
    """Test that with at most 50 % of SS's capacity in the cheap region, 4 QPS of need puts
    2 there (not all 4) and covers the rest in the dear one."""
    ss = config(cls="SS", tp=2, qps=1.0)
    p = problem(
        [ss],
        demand={("a", "SS"): 4.0},
        inventory={("cheap", "A100"): 16, ("dear", "A100"): 16},
        intensity={"cheap": 100.0, "dear": 500.0},
        region_share_limits={("SS", "cheap"): 0.5},
    )
    _, counts = greedy_plan(p, p.configs, PlannerSettings())
    assert counts == {("cheap", ss): 2, ("dear", ss): 2}


def test_a_share_does_not_round_a_covered_class_short() -> None:
    """Test that without a share below 1 the last instance still rounds the cover up."""
    ss = config(cls="SS", tp=2, qps=3.0)
    p = problem(
        [ss], demand={("a", "SS"): 4.0}, inventory={("r1", "A100"): 16},
        intensity={"r1": 100.0},
    )  # fmt: skip
    _, counts = greedy_plan(p, p.configs, PlannerSettings())
    assert counts == {("r1", ss): 2}
