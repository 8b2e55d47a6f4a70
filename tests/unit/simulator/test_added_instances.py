"""The simulator's added instances: SLO feedback gives a pool whose load outgrew its plan,
and that still misses at the maximum clock, one more instance within the epoch."""

from __future__ import annotations

import pytest

from loadgen.simulator.results import SimResult
from services.planner import slo_feedback
from tests.unit.simulator.two_phase import two_phase_run


def _burst_run(grow: int) -> SimResult:
    """Two minutes at 0.5 req/s, then two at 30 (one epoch: no planned re-plan)."""
    return two_phase_run(
        "default",
        gpus=8,
        control={"sample_period_s": 5.0, "epoch_s": 1200.0, "steps_per_epoch": 20},
        calm=(0.5, 120.0),
        busy=(30.0, 120.0),
        plan_tps=(),
        plan_group_pools=False,
        plan_split_long_input=False,
        feedback_grow=grow,
    )


def test_a_burst_above_the_plan_adds_an_instance_only_when_growth_is_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    added: list[tuple[str, str, float]] = []
    original = slo_feedback.CapacityFeedback.started

    def started(self: slo_feedback.CapacityFeedback, pool: str, host: str, ready_s: float,
                hold_s: float) -> None:  # fmt: skip
        added.append((pool, host, ready_s))
        original(self, pool, host, ready_s, hold_s)

    monkeypatch.setattr(slo_feedback.CapacityFeedback, "started", started)
    off = _burst_run(0)
    assert added == []
    on = _burst_run(1)
    assert len(added) == 1
    pool, host, ready_s = added[0]
    assert pool == host  # the region has room: the pool itself grows
    assert 120.0 < ready_s < 240.0
    assert on.scale_events > off.scale_events


def test_an_added_instance_whose_gpus_another_start_took_is_withdrawn_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that when the room counted for a host is gone by the time its instance would
    start (another start of the same tick took the GPUs), the grow is withdrawn (nothing
    starts, nothing is recorded as added) instead of the node placement failing."""
    from loadgen.simulator import plan_switch

    withdrawn: list[tuple[str, str]] = []
    original = slo_feedback.CapacityFeedback.withdraw

    def withdraw(self: slo_feedback.CapacityFeedback, pool: str, host: str) -> None:
        withdrawn.append((pool, host))
        original(self, pool, host)
        assert (pool, host) not in self.added

    taken = {"now": False}
    grow = slo_feedback.CapacityFeedback.grow
    room = plan_switch.PlanSwitch._room

    def grow_then_take(self: slo_feedback.CapacityFeedback, *args: object) -> object:
        grown = grow(self, *args)  # type: ignore[arg-type]
        taken["now"] = bool(grown)  # from here on this tick, the GPUs are gone
        return grown

    def room_unless_taken(self: plan_switch.PlanSwitch, pool: object) -> int:
        return 0 if taken["now"] else room(self, pool)  # type: ignore[arg-type]

    monkeypatch.setattr(slo_feedback.CapacityFeedback, "grow", grow_then_take)
    monkeypatch.setattr(slo_feedback.CapacityFeedback, "withdraw", withdraw)
    monkeypatch.setattr(plan_switch.PlanSwitch, "_room", room_unless_taken)
    started: list[str] = []
    monkeypatch.setattr(
        slo_feedback.CapacityFeedback,
        "started",
        lambda self, pool, host, ready_s, hold_s: started.append(pool),
    )
    _burst_run(1)
    assert withdrawn
    assert started == []
