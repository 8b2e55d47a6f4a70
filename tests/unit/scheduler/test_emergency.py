"""Tests for the DynamoLLM emergency ladder state machine."""

from __future__ import annotations

from dataclasses import replace

from services.scheduler.emergency import (
    EmergencyAction,
    EmergencyConfig,
    EmergencyState,
    InstanceView,
    ReleaseOverrides,
    ReorderQueue,
    RequestMaxClock,
    ResteerRequest,
    Rung,
    ShedRequest,
    SteerTarget,
    WaitingView,
    step,
)

CONFIG = EmergencyConfig(
    imminent_laxity_s=0.5, escalate_after_s=2.0, recover_after_s=5.0, shed_wait_s=3.0
)


def _view(
    now: float, requests: list[WaitingView], targets: list[SteerTarget] | None = None
) -> InstanceView:
    return InstanceView(
        now_s=now, instance_id="i0", pool_id="p0", requests=requests, targets=targets or []
    )


def _late(rid: str = "r", arrival: float = 0.0, *, started: bool = False) -> WaitingView:
    return WaitingView(
        request_id=rid, arrival_s=arrival, deadline_s=10.0, remaining_s=100.0, started=started
    )


def test_no_risk_means_no_action_and_no_escalation() -> None:
    """Test that a comfortable queue leaves the ladder at NORMAL."""
    calm = WaitingView(request_id="r", arrival_s=0.0, deadline_s=100.0, remaining_s=1.0)
    state, actions = step(EmergencyState(), _view(1.0, [calm]), CONFIG)
    assert state.rung is Rung.NORMAL
    assert actions == []


def test_ladder_escalates_one_rung_per_dwell_in_dynamollm_order() -> None:
    """Test reorder → max clock → re-steer → shed, each after escalate_after_s."""
    target = SteerTarget(instance_id="i1", pool_id="p0", free_slots=0, expected_wait_s=0.0)
    state = EmergencyState()
    seen: list[tuple[Rung, list[object]]] = []
    for now in (0.0, 1.0, 2.0, 4.0, 6.0):
        state, actions = step(state, _view(now, [_late()], [target]), CONFIG)
        seen.append((state.rung, list(actions)))
    assert [rung for rung, _ in seen] == [
        Rung.REORDER,
        Rung.REORDER,
        Rung.MAX_CLOCK,
        Rung.RESTEER,
        Rung.SHED,
    ]
    assert seen[0][1] == [ReorderQueue("i0", "llf")]
    assert seen[1][1] == []
    assert seen[2][1] == [RequestMaxClock("i0")]
    assert seen[3][1] == []  # nowhere to re-steer (no free slot)
    shed = seen[4][1]
    assert len(shed) == 1
    assert isinstance(shed[0], ShedRequest)
    assert shed[0].reason.startswith("slo_unmeetable")


def test_resteer_prefers_same_pool_and_skips_started_or_hopeless_targets() -> None:
    """Test that re-steering picks a feasible target, same pool first, never started work."""
    requests = [
        WaitingView(request_id="a", arrival_s=0.0, deadline_s=10.0, remaining_s=9.8),
        WaitingView(request_id="b", arrival_s=0.0, deadline_s=10.0, remaining_s=9.8, started=True),
    ]
    targets = [
        SteerTarget(instance_id="other", pool_id="p1", free_slots=5, expected_wait_s=0.0),
        SteerTarget(instance_id="same", pool_id="p0", free_slots=1, expected_wait_s=0.05),
        SteerTarget(instance_id="slow", pool_id="p0", free_slots=9, expected_wait_s=5.0),
    ]
    early = EmergencyState(rung=Rung.MAX_CLOCK, rung_since_s=0.0)
    state, actions = step(early, _view(0.1, requests, targets), CONFIG)
    assert (state.rung, actions) == (Rung.MAX_CLOCK, [])  # max clock still gets its dwell
    dwelt = EmergencyState(rung=Rung.MAX_CLOCK, rung_since_s=-2.0)
    state, actions = step(dwelt, _view(0.1, requests, targets), CONFIG)
    assert state.rung is Rung.RESTEER
    assert actions == [ResteerRequest("a", "i0", "same")]


def test_shed_spares_recent_arrivals() -> None:
    """Test that only requests that waited at least shed_wait_s are shed."""
    state = EmergencyState(rung=Rung.SHED, rung_since_s=0.0)
    _, actions = step(state, _view(4.0, [_late("old", 0.0), _late("new", 3.5)]), CONFIG)
    assert [a.request_id for a in actions if isinstance(a, ShedRequest)] == ["old"]


def test_ladder_recovers_after_a_calm_period() -> None:
    """Test that overrides are released once nothing is at risk for recover_after_s."""
    state = EmergencyState(rung=Rung.MAX_CLOCK, rung_since_s=0.0)
    state, actions = step(state, _view(10.0, []), CONFIG)
    assert (state.rung, actions) == (Rung.MAX_CLOCK, [])
    state, actions = step(state, _view(15.0, []), CONFIG)
    assert state.rung is Rung.NORMAL
    assert actions == [ReleaseOverrides("i0")]


def test_resteer_honours_the_plans_class_groups() -> None:
    """Test that a class goes only to a target whose plan lists it (or lists no classes)."""
    short = WaitingView(
        request_id="s", arrival_s=0.0, deadline_s=10.0, remaining_s=9.8, request_class="SS"
    )
    long_pool = SteerTarget(
        instance_id="long",
        pool_id="p0",  # same pool and shortest wait: today's first choice
        free_slots=5,
        expected_wait_s=0.0,
        classes=frozenset({"LS", "LL"}),
    )
    short_pool = SteerTarget(
        instance_id="short",
        pool_id="p1",
        free_slots=5,
        expected_wait_s=0.05,
        classes=frozenset({"SS", "SL"}),
    )
    open_pool = SteerTarget(instance_id="open", pool_id="p2", free_slots=5, expected_wait_s=0.06)
    dwelt = EmergencyState(rung=Rung.MAX_CLOCK, rung_since_s=-2.0)

    def moved(targets: list[SteerTarget], request: WaitingView = short) -> list[EmergencyAction]:
        return step(dwelt, _view(0.1, [request], targets), CONFIG)[1]

    assert moved([long_pool]) == []  # excluded group: stays (and may be shed later)
    assert moved([long_pool, short_pool]) == [ResteerRequest("s", "i0", "short")]
    assert moved([long_pool, open_pool]) == [ResteerRequest("s", "i0", "open")]
    unrestricted = replace(short, request_class=None)  # no plan (or a class routed by *)
    assert moved([long_pool, short_pool], unrestricted) == [ResteerRequest("s", "i0", "long")]
