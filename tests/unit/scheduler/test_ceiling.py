"""The scheduler's ceiling: bounded queues per pool and the wait bound (pure parts)."""

from __future__ import annotations

import pytest

from services.scheduler.ceiling import Ceiling
from services.scheduler.pool_queues import SchedulerState
from tests.factories import classified_request


def _queued(state: SchedulerState, ceiling: Ceiling, ids: list[str], pool: str, now: float) -> None:
    kept, refused = ceiling.admit(
        state, [classified_request(rid, pool_id=pool) for rid in ids], now=now
    )
    assert not refused
    for req in kept:
        state.push(req)


def test_a_full_pool_refuses_the_rest_of_a_batch_and_other_pools_still_admit() -> None:
    """Test that a pool at its bound refuses what exceeds it, counting the batch's own
    admissions, while another pool's requests are admitted."""
    state, ceiling = SchedulerState("fcfs"), Ceiling(3, 10.0)
    _queued(state, ceiling, ["a", "b"], "p", now=0.0)
    batch = [classified_request(rid, pool_id="p") for rid in ("c", "d", "e")]
    batch.append(classified_request("x", pool_id="q"))
    kept, refused = ceiling.admit(state, batch, now=1.0)
    assert [r.request.request_id for r in kept] == ["c", "x"]
    assert [r.request.request_id for r in refused] == ["d", "e"]


def test_only_queued_requests_past_the_wait_bound_are_taken_out() -> None:
    """Test that requests queued longer than the bound leave their queue, younger ones and
    placed ones (no longer queued) stay, and a requeue keeps its first entry time."""
    state, ceiling = SchedulerState("fcfs"), Ceiling(100, 5.0)
    _queued(state, ceiling, ["old", "placed"], "p", now=0.0)
    _queued(state, ceiling, ["young"], "p", now=4.0)
    assert [r.request.request_id for r in state.pop("p", 1, 0.0)] == ["old"]
    state.push(classified_request("old", pool_id="p"))  # requeued: still entered at 0
    ceiling.entered(["old"], now=4.5)
    assert [r.request.request_id for r in state.pop("p", 1, 0.0)] == ["placed"]
    expired = ceiling.expired(state, now=6.0)
    assert [r.request.request_id for r in expired] == ["old"]
    assert len(state.queue("p")) == 1  # young
    assert len(ceiling) == 2  # placed (running) and young
    ceiling.ended("placed")
    assert [r.request.request_id for r in ceiling.expired(state, now=9.5)] == ["young"]
    assert len(ceiling) == 0


def test_a_ceiling_without_room_or_wait_is_refused() -> None:
    """Test that a zero queue bound or a non-positive wait bound is a configuration error."""
    with pytest.raises(ValueError, match="ceiling"):
        Ceiling(0, 1.0)
    with pytest.raises(ValueError, match="ceiling"):
        Ceiling(1, 0.0)
