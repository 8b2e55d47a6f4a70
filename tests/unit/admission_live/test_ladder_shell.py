"""The scheduler's live ladder glue and the dvfs agent's max-clock override."""

from __future__ import annotations

from collections.abc import Sequence

from proto.messages import ClassifiedRequest, ClockOverride, WorkerStats
from services.dvfs.clock_override import ClockOverrides
from services.scheduler.emergency import (
    EmergencyConfig,
    ReleaseOverrides,
    RequestMaxClock,
    ResteerRequest,
)
from services.scheduler.ladder_shell import LadderBook, SchedulerQueues
from services.scheduler.pool_queues import SchedulerState
from tests.factories import classified_request, worker_stats

CONFIG = EmergencyConfig(
    imminent_laxity_s=0.0, escalate_after_s=1.0, recover_after_s=2.0, shed_wait_s=0.5
)


def _request(
    rid: str, pool: str, *, arrival: float, deadline: float, predicted: int = 100
) -> ClassifiedRequest:
    return classified_request(
        rid,
        prompt_tokens=100,
        output_tokens=100,
        predicted_output_tokens=predicted,
        pool_id=pool,
        arrival_s=arrival,
        ttft_slo_ms=0.0,
        tbt_slo_ms=0.0,
        profile_ttft_ms=100.0,
        lat_s=predicted * 0.01 + 0.1,
        deadline_s=deadline,
    )


def _stats(worker: str, pool: str, free: int) -> WorkerStats:
    return worker_stats(worker, pool_id=pool, region="CISO", free_slots=free, clock_mhz=1005.0)


def _kinds(actions: Sequence[tuple[str, object]]) -> list[str]:
    return [type(a).__name__ for _, a in actions]


def test_a_hopeless_queue_climbs_the_ladder_and_sheds_only_when_allowed() -> None:
    """Test that reorder, max clock, then shed follow one another; shed is dropped when off."""
    for shed in (True, False):
        state = SchedulerState("llf")
        state.push(_request("late", "a", arrival=0.0, deadline=1.0))  # laxity < 0 at once
        book = LadderBook(CONFIG, shed=shed, clock_hold_s=10.0)
        queues = SchedulerQueues(state)
        seen = [_kinds(book.tick(queues, t, 0.0)) for t in (0.0, 1.0, 2.0, 3.0)]
        assert seen[0] == ["ReorderQueue"]
        assert seen[1] == ["RequestMaxClock"]
        assert seen[2] == []  # RESTEER rung: no other pool to take it
        assert seen[3] == (["ShedRequest"] if shed else [])


def test_reorder_is_a_no_op_under_llf_and_switches_another_discipline() -> None:
    """Test that REORDER re-ranks an FCFS queue by LLF and release restores FCFS."""
    state = SchedulerState("fcfs")
    state.push(_request("early-long", "a", arrival=0.0, deadline=100.0, predicted=1000))
    state.push(_request("late-short", "a", arrival=1.0, deadline=2.0, predicted=10))
    queues = SchedulerQueues(state)
    assert next(q.request_id for q in queues.queued("a", 1.0)) == "early-long"
    assert queues.use_discipline("a", "llf", 1.0)
    assert next(q.request_id for q in queues.queued("a", 1.0)) == "late-short"
    assert not queues.use_discipline("a", "llf", 1.0)
    assert queues.use_discipline("a", None, 1.0)
    assert state.queue("a").name == "fcfs"


def test_an_at_risk_request_is_resteered_only_to_a_pool_with_room() -> None:
    """Test that at the RESTEER rung a request moves to a pool whose workers report free slots."""
    config = EmergencyConfig(imminent_laxity_s=0.5, escalate_after_s=0.05, shed_wait_s=99.0)
    for free, moved in ((4, True), (0, False)):
        state = SchedulerState("llf")
        # Lat = 100 x 10 ms + 100 ms = 1.1 s: laxity 0.3 s at t = 1.8, 0.1 s at t = 2.0.
        state.push(_request("r", "a", arrival=0.0, deadline=3.2))
        book = LadderBook(config, shed=True, clock_hold_s=10.0)
        book.saw_stats(_stats("w1", "b", free=free), 0.0)
        queues = SchedulerQueues(state)
        steps = [book.tick(queues, t, 1.0) for t in (1.8, 1.9, 2.0)]
        assert _kinds(steps[0]) == ["ReorderQueue"]
        assert _kinds(steps[1]) == ["RequestMaxClock"]
        assert steps[2] == ([("a", ResteerRequest("r", "a", "b"))] if moved else [])


def test_stale_heartbeats_offer_no_resteer_target() -> None:
    """Test that a pool whose workers fell silent is not a re-steer target."""
    state = SchedulerState("llf")
    state.push(_request("r", "a", arrival=0.0, deadline=3.2))
    book = LadderBook(
        EmergencyConfig(imminent_laxity_s=0.5, escalate_after_s=0.05), shed=False, clock_hold_s=10.0
    )
    book.saw_stats(_stats("w1", "b", free=4), 0.0)
    queues = SchedulerQueues(state)
    steps = [book.tick(queues, t, 100.0) for t in (1.8, 1.9, 2.0)]
    assert steps[2] == []


def test_max_clock_is_refreshed_while_the_emergency_lasts_and_released_after() -> None:
    """Test that the override is re-sent before it lapses and released when calm returns."""
    state = SchedulerState("llf")
    state.push(_request("late", "a", arrival=0.0, deadline=1.0))
    book = LadderBook(
        EmergencyConfig(
            imminent_laxity_s=0.0, escalate_after_s=1.0, recover_after_s=2.0, shed_wait_s=99
        ),
        shed=False,
        clock_hold_s=4.0,
    )
    queues = SchedulerQueues(state)
    kinds = [_kinds(book.tick(queues, t, 0.0)) for t in (0.0, 1.0, 2.0, 3.5)]
    assert kinds[1] == ["RequestMaxClock"]
    assert kinds[3] == ["RequestMaxClock"]  # 4 s hold, refreshed once less than 2 s remain
    state.remove("late")
    calm = [_kinds(book.tick(queues, t, 0.0)) for t in (4.0, 6.5)]
    assert calm == [[], ["ReleaseOverrides"]]
    release = book.clock_override("a", ReleaseOverrides("a"))
    assert release.hold_s == 0.0
    assert book.clock_override("a", RequestMaxClock("a")).hold_s == 4.0


def test_dvfs_honours_only_the_schedulers_bounded_override() -> None:
    """Test that only the scheduler pins max clock, per pool or worker, for a bounded hold."""
    overrides = ClockOverrides()
    forged = ClockOverride(pool_id="a", hold_s=10.0, issued_by="client")
    assert not overrides.apply(forged, 0.0)
    assert overrides.target("a", "w0", 900.0, 1410.0, 1.0) == 900.0
    assert overrides.apply(ClockOverride(pool_id="a", hold_s=10.0, issued_by="scheduler"), 0.0)
    assert overrides.target("a", "w0", 900.0, 1410.0, 9.9) == 1410.0
    assert overrides.target("b", "w0", 900.0, 1410.0, 9.9) == 900.0
    assert overrides.target("a", "w0", 900.0, 1410.0, 10.0) == 900.0  # expired
    one = ClockOverride(pool_id="a", worker_id="w1", hold_s=5.0, issued_by="scheduler")
    overrides.apply(one, 0.0)
    assert not overrides.active("a", "w0", 1.0)
    assert overrides.active("a", "w1", 1.0)
    overrides.apply(ClockOverride(pool_id="a", hold_s=0.0, issued_by="scheduler"), 2.0)
    assert not overrides.active("a", "w1", 2.0)
