"""Putting the epoch planner's plan in force, make before break: planned instances start
now, and routes switch and surplus instances drain once they are ready (or, with TP modes
over full GPUs, once :mod:`loadgen.simulator.mode_switch` has freed room for them).

:class:`PlanSwitch` is a base of :class:`loadgen.simulator.planned.EpochPlanner`, which
builds the state declared here in its ``__init__``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import msgspec

from loadgen.simulator.mode_switch import make_room, missing_instances, start_wanted
from loadgen.simulator.nodes import drain_order

if TYPE_CHECKING:
    from loadgen.simulator.cluster_view import FleetActions, PlannerView
    from loadgen.simulator.feedback import SloFeedback
    from proto.messages import Plan as WirePlan

__all__ = ["PlanSwitch"]


class PlanSwitch:
    """Puts a plan in force (a base of ``EpochPlanner``)."""

    view: PlannerView
    actions: FleetActions
    feedback: SloFeedback | None
    switching: bool
    plan: WirePlan | None
    clock_caps: dict[str, float]
    _waiting: tuple[dict[str, int], Callable[[float], bool]] | None

    def top_up(self, t_s: float) -> None:
        """A plan waiting for GPUs its other TP modes held: start what now fits, and switch
        to it once every planned instance is started (:mod:`loadgen.simulator.mode_switch`)."""
        if self._waiting is None:
            return
        want, switch = self._waiting
        ready_s = start_wanted(self.view, self.actions.start_instance, want, t_s)
        if missing_instances(self.view, want):
            make_room(self.view, want)
            self.actions.resteer_orphans(t_s)
            return
        self._waiting = None
        ready_s = max([ready_s, *(i.ready_s for p in self.view.pools for i in p.live())])
        self.actions.schedule_tick(max(ready_s, t_s), switch)

    def _apply(self, plan: WirePlan, decisions_clock: Mapping[str, float | None]) -> None:
        """Start planned instances now; switch routes and drain surplus once they are ready."""
        view = self.view
        t_s = view.now_s
        want = {p.pool_id: p.instances for p in plan.pools}
        ready_s = start_wanted(view, self.actions.start_instance, want, t_s)
        # The router keeps the sim pools' measured no-queue profile (Lat of FREESH Eq. 6), so
        # every policy set is judged against the same per-request E2E bound.
        measured = {p.pool_id: p for p in view.pools}
        pools = [
            msgspec.structs.replace(
                p,
                ttft_ms=measured[p.pool_id].ttft_s * 1000.0,
                tbt_ms=measured[p.pool_id].tbt_s * 1000.0,
            )
            for p in plan.pools
        ]
        pending = msgspec.structs.replace(plan, pools=pools)
        caps = {pid: c for pid, c in decisions_clock.items() if c is not None}
        # Cold instances take instance_start_s, and a node's boot before it when it was off.
        delay = ready_s - t_s

        def switch(at_s: float) -> bool:
            self.switching = False
            self.plan = pending
            self.clock_caps = caps
            for pool in view.pools:
                live = pool.live()
                surplus = len(live) - want.get(pool.pool_id, 0)
                for instance in drain_order(live)[: max(0, surplus)]:
                    instance.draining = True
            self.actions.count_scale_event()
            if self.feedback is not None:
                self.feedback.clear()  # judge the new plan on its own completions
            self.actions.update_routes(at_s)
            self.actions.resteer_orphans(at_s)
            return False

        if missing_instances(view, want):
            # TP modes over full GPUs: free them first (mode_switch), switch when started.
            self.switching = True
            self._waiting = (want, switch)
            make_room(view, want)
            self.actions.resteer_orphans(t_s)
        elif delay > 0:
            self.switching = True
            self.actions.schedule_tick(t_s + delay, switch)
        else:
            switch(t_s)
