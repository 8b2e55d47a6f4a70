"""The live ladder's re-steer follows the plan's class groups (``PoolPlan.classes``)."""

from __future__ import annotations

from proto.messages import ClassifiedRequest, Plan, PoolPlan, RouteWeight
from services.scheduler.emergency import EmergencyAction, EmergencyConfig, ResteerRequest
from services.scheduler.ladder_shell import LadderBook, SchedulerQueues
from services.scheduler.pool_queues import SchedulerState
from tests.factories import classified_request, worker_stats

CONFIG = EmergencyConfig(imminent_laxity_s=0.5, escalate_after_s=0.05, shed_wait_s=99.0)


def _request(request_class: str) -> ClassifiedRequest:
    # Lat = 100 x 10 ms + 100 ms = 1.1 s: laxity 0.1 s at t = 2.0 (at risk, still meetable).
    return classified_request(
        "r",
        prompt_tokens=100,
        output_tokens=100,
        predicted_output_tokens=100,
        request_class=request_class,
        pool_id="a",
        arrival_s=0.0,
        ttft_slo_ms=0.0,
        tbt_slo_ms=0.0,
        profile_ttft_ms=100.0,
        lat_s=1.1,
        deadline_s=3.2,
    )


def _plan(classes: dict[str, list[str]]) -> Plan:
    pools = [
        PoolPlan(pool_id=p, region="CISO", gpu="A100-80GB", tp=1, instances=1, classes=c)
        for p, c in classes.items()
    ]
    return Plan(
        epoch=1,
        issued_at=0.0,
        valid_until=60.0,
        scheme="dynamollm9",
        pools=pools,
        routes={"*": [RouteWeight(pool_id=p, weight=1.0) for p in classes]},
    )


def _resteers(
    request_class: str, free_pools: list[str], plan: Plan | None
) -> list[tuple[str, EmergencyAction]]:
    """Climb to the RESTEER rung with one at-risk request in pool ``a``; its re-steers."""
    state = SchedulerState("llf")
    state.push(_request(request_class))
    book = LadderBook(CONFIG, shed=False, clock_hold_s=10.0)
    if plan is not None:
        book.saw_plan(plan)
    for i, pool in enumerate(free_pools):
        book.saw_stats(worker_stats(f"w{i}", pool_id=pool, region="CISO", free_slots=4), 0.0)
    queues = SchedulerQueues(state)
    steps = [book.tick(queues, t, 1.0) for t in (1.8, 1.9, 2.0)]
    return steps[2]


SPLIT = {"a": ["SS", "SL"], "long": ["LS", "LL"], "short": ["SS", "SL"]}


def test_a_short_request_is_not_resteered_into_a_long_input_pool() -> None:
    """Test that a pool whose plan excludes the class is no target, with room or not."""
    assert _resteers("SS", ["long"], _plan(SPLIT)) == []


def test_a_short_request_is_resteered_to_a_pool_of_its_group() -> None:
    """Test that the pool listing the class takes it although the other has as much room."""
    assert _resteers("SS", ["long", "short"], _plan(SPLIT)) == [
        ("a", ResteerRequest("r", "a", "short"))
    ]


def test_no_plan_or_an_open_pool_keeps_any_target() -> None:
    """Test today's behaviour without a plan, for classless pools and for unlisted classes."""
    anywhere = [("a", ResteerRequest("r", "a", "long"))]
    assert _resteers("SS", ["long"], None) == anywhere
    assert _resteers("SS", ["long"], _plan({"a": ["SS"], "long": []})) == anywhere
    assert _resteers("SS", ["long"], _plan({"a": ["SS"]})) == anywhere  # pool not in the plan
    assert _resteers("MM", ["long"], _plan(SPLIT)) == anywhere  # MM is routed by *


def test_a_newer_plan_replaces_the_groups() -> None:
    """Test that the book follows the latest plan it is given, not the union of plans."""
    state = SchedulerState("llf")
    state.push(_request("SS"))
    book = LadderBook(CONFIG, shed=False, clock_hold_s=10.0)
    book.saw_plan(_plan(SPLIT))
    book.saw_plan(_plan({"a": ["SS"], "long": ["SS", "LL"]}))
    book.saw_stats(worker_stats("w0", pool_id="long", region="CISO", free_slots=4), 0.0)
    queues = SchedulerQueues(state)
    steps = [book.tick(queues, t, 1.0) for t in (1.8, 1.9, 2.0)]
    assert steps[2] == [("a", ResteerRequest("r", "a", "long"))]
