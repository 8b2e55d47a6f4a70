"""The simulator's make-before-break plan switch: a plan applied while an older one still
waits for its instances voids the older one's switch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from loadgen.simulator import plan_switch
from loadgen.simulator.plan_switch import PlanSwitch
from proto.messages import Plan, PoolPlan, RouteWeight


@dataclass
class _Instance:
    draining: bool = False
    ready_s: float = 0.0
    requests: dict[str, object] = field(default_factory=dict)
    node: object | None = None


@dataclass
class _Pool:
    pool_id: str
    instances: list[_Instance] = field(default_factory=list)
    ttft_s: float = 0.2
    tbt_s: float = 0.02

    def live(self) -> list[_Instance]:
        return [i for i in self.instances if not i.draining]


class _Switch(PlanSwitch):
    """A PlanSwitch over fake pools; ticks are kept, not run, so the test orders them."""

    def __init__(self, pools: list[_Pool]) -> None:
        self.ticks: list[tuple[float, Callable[[float], bool]]] = []
        self.clock = SimpleNamespace(
            now_s=0.0, pools=pools, pool_by_id={p.pool_id: p for p in pools}
        )
        self.view = self.clock
        self.actions = SimpleNamespace(  # type: ignore[assignment]
            schedule_tick=lambda t, fn: self.ticks.append((t, fn)),
            update_routes=lambda t: None,
            resteer_orphans=lambda t: None,
            count_scale_event=lambda: None,
            start_instance=None,
        )
        self.learned = SimpleNamespace(new_plan=lambda: None)  # type: ignore[assignment]
        self.feedback = None
        self.switching = False
        self.plan = None
        self.clock_caps = {}
        self._waiting = None
        self._applied = 0
        self._amend = None
        self._order = ()
        self._added_log = []


def _plan(epoch: int, counts: dict[str, int]) -> Plan:
    pools = [
        PoolPlan(pool_id=pid, region="r", gpu="H100-80GB", tp=4, instances=n)
        for pid, n in counts.items()
    ]
    routes = {"*": [RouteWeight(pool_id=pid, weight=float(n)) for pid, n in counts.items()]}
    return Plan(epoch=epoch, issued_at=0.0, valid_until=1.0, scheme="s", pools=pools,
                routes=routes)  # fmt: skip


def _starting(delay_s: float) -> Any:
    """start_wanted that starts every wanted instance, ready ``delay_s`` from now."""

    def start(view: Any, _start: object, want: dict[str, int], t_s: float) -> float:
        for pool in view.pools:
            while len(pool.live()) < want.get(pool.pool_id, 0):
                pool.instances.append(_Instance(ready_s=t_s + delay_s))
        return t_s + delay_s if any(want.values()) else t_s

    return start


def test_a_newer_plan_voids_the_switch_of_one_still_waiting_for_its_instances(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that plan A's switch, run after plan B was applied, neither puts A in force nor
    drains B's instances as A's surplus; B's switch puts B in force and drains A's."""
    a, b = _Pool("a", [_Instance()]), _Pool("b")
    switch = _Switch([a, b])
    monkeypatch.setattr(plan_switch, "missing_instances", lambda view, want: {})

    monkeypatch.setattr(plan_switch, "start_wanted", _starting(100.0))
    plan_a = _plan(1, {"a": 2, "b": 0})
    switch._apply(plan_a, {"a": None, "b": None})
    assert [t for t, _ in switch.ticks] == [100.0]

    switch.clock.now_s = 10.0
    monkeypatch.setattr(plan_switch, "start_wanted", _starting(30.0))
    plan_b = _plan(2, {"a": 0, "b": 1})
    switch._apply(plan_b, {"a": None, "b": 1485.0})
    (late_t, late_a), (t_b, switch_b) = switch.ticks
    assert t_b == 40.0

    switch_b(t_b)
    assert switch.plan is not None
    assert switch.plan.epoch == 2
    assert switch.clock_caps == {"b": 1485.0}
    assert not a.live()
    assert len(b.live()) == 1

    late_a(late_t)
    assert switch.plan.epoch == 2  # still B
    assert len(b.live()) == 1  # B's instance kept: A's late switch drained nothing
    assert switch.clock_caps == {"b": 1485.0}


def test_a_switch_with_no_newer_plan_puts_its_plan_in_force(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test the control: alone, a delayed switch applies its plan and drains the surplus."""
    a, b = _Pool("a", [_Instance()]), _Pool("b")
    switch = _Switch([a, b])
    monkeypatch.setattr(plan_switch, "missing_instances", lambda view, want: {})
    monkeypatch.setattr(plan_switch, "start_wanted", _starting(30.0))
    switch._apply(_plan(1, {"a": 0, "b": 1}), {"a": None, "b": None})
    switching = switch.switching
    ((t, fn),) = switch.ticks
    fn(t)
    assert switching
    assert switch.plan is not None
    assert switch.plan.epoch == 1
    assert not switch.switching
    assert not a.live()
    assert len(b.live()) == 1
