"""Putting the epoch planner's plan in force, make before break: planned instances start
now, and routes switch and surplus instances drain once they are ready (or, with TP modes
over full GPUs, once :mod:`loadgen.simulator.mode_switch` has freed room for them).

:class:`PlanSwitch` is a base of :class:`loadgen.simulator.planned.EpochPlanner`, which
builds the state declared here in its ``__init__``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import msgspec

from loadgen.simulator.mode_switch import make_room, missing_instances, start_wanted
from loadgen.simulator.nodes import drain_order
from services.planner.slo_feedback import growth_hosts

if TYPE_CHECKING:
    from loadgen.simulator.cluster_view import FleetActions, PlannerView
    from loadgen.simulator.feedback import SloFeedback
    from loadgen.simulator.pools import Pool
    from proto.messages import Plan as WirePlan
    from services.planner.slo_feedback import CapacityFeedback

__all__ = ["PlanSwitch"]

Added = tuple[tuple[str, str], ...]
"""SLO feedback's added instances: (short pool, host)."""
Amend = Callable[[Added], "WirePlan"]
"""The plan in force, wired again with the added instances."""


class PlanSwitch:
    """Puts a plan in force (a base of ``EpochPlanner``)."""

    view: PlannerView
    actions: FleetActions
    feedback: SloFeedback | None
    learned: CapacityFeedback
    capacity: dict[str, float]
    step_s: float
    switching: bool
    plan: WirePlan | None
    clock_caps: dict[str, float]
    _waiting: tuple[dict[str, int], Callable[[float], bool]] | None
    _applied: int
    """Plans applied so far: a switch still pending when a newer plan is applied is void."""
    _mode: dict[str, tuple[str, int, str | None]]
    _amend: Amend | None
    """The plan in force, re-wired with added instances (``None``: no plan yet)."""
    _order: tuple[str, ...]
    _added_log: list[tuple[str, str, float]]
    """SLO feedback's added instances under the plan in force: (short pool, host, ready)."""

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

    def grow(self, t_s: float) -> None:
        """SLO feedback's added instances (``CapacityFeedback.grow``): one more instance for
        a pool that still misses at the maximum clock, in the pool itself or, where its
        region is full, in a pool of its mode elsewhere (``growth_hosts``), without a
        re-plan. A draining instance of the host is taken back first (it is ready now); the
        host's share of the short pool's classes is routed to it once it is ready."""
        if self.feedback is None or self.learned.settings.grow_limit <= 0 or self._amend is None:
            return
        gone = self.learned.expire(t_s)
        if gone:
            # The pools they were added for met their SLO for a hold: back to the plan.
            for short, host in gone:
                self._added_log.remove(next(e for e in self._added_log if e[:2] == (short, host)))
            kept = self._amend(tuple(self.learned.added))
            wants = {p.pool_id: p.instances for p in kept.pools}
            for host in {host for _, host in gone}:
                _drain_surplus(self.view.pool_by_id[host], wants.get(host, 0))
            self._rewire(t_s)
            self.actions.count_scale_event()
        room = {p.pool_id: self._room(p) for p in self.view.pools}
        hosts = {
            p.pool_id: growth_hosts(p.pool_id, self._mode, room, self._order)
            for p in self.view.pools
            if p.live()
        }
        for short, host in self.learned.grow(self.feedback, t_s, hosts, self.capacity):
            pool = self.view.pool_by_id[host]
            draining = [i for i in pool.instances if i.draining]
            if not draining and self._room(pool) <= 0:
                # An earlier start of this tick (another pool's mode on the same GPUs, or
                # a plan's make-before-break) took the GPUs the room was counted on.
                self.learned.withdraw(short, host)
                continue
            if draining:
                draining[0].draining = False
                ready_s = max(t_s, draining[0].ready_s)
            else:
                started = self.actions.start_instance(pool, t_s)
                ready_s = t_s if started is None else started.ready_s
            self.learned.started(short, host, ready_s, self.step_s)
            self.actions.count_scale_event()
            self._added_log.append((short, host, ready_s))

            def reroute(at_s: float, amend: Amend | None = self._amend) -> bool:
                if self._amend is amend:  # no other plan came in meanwhile
                    self._rewire(at_s)
                return False

            self.actions.schedule_tick(max(ready_s, t_s), reroute)

    def _rewire(self, at_s: float) -> None:
        """Route by the plan in force with the added instances that are ready at ``at_s``
        (one still starting takes no share yet)."""
        assert self._amend is not None
        ready = Counter((short, host) for short, host, r in self._added_log if r <= at_s)
        routable = []
        for pair in self.learned.added:
            if ready[pair] > 0:
                ready[pair] -= 1
                routable.append(pair)
        self.plan = self._measured(self._amend(tuple(routable)))
        self.actions.update_routes(at_s)

    def _room(self, pool: Pool) -> int:
        """Instances of ``pool`` that could start now: a draining one of its own, or its TP
        on free GPUs of its (region, GPU type), powered or not."""
        if any(i.draining for i in pool.instances):
            return 1
        nodes = self.view.nodes.groups.get((pool.region, pool.gpu), [])
        return sum(n.free_gpus() // pool.config.tp for n in nodes)

    def _measured(self, plan: WirePlan) -> WirePlan:
        """``plan`` with the sim pools' measured no-queue profile (Lat of FREESH Eq. 6): the
        router keeps it, so every policy set is judged against the same E2E bound."""
        measured = self.view.pool_by_id
        pools = [
            msgspec.structs.replace(
                p,
                ttft_ms=measured[p.pool_id].ttft_s * 1000.0,
                tbt_ms=measured[p.pool_id].tbt_s * 1000.0,
            )
            for p in plan.pools
        ]
        return msgspec.structs.replace(plan, pools=pools)

    def _apply(
        self,
        plan: WirePlan,
        decisions_clock: Mapping[str, float | None],
        amend: Amend | None = None,
        order: tuple[str, ...] = (),
    ) -> None:
        """Start planned instances now; switch routes and drain surplus once they are ready.
        ``amend`` re-wires the plan with SLO feedback's added instances (:meth:`grow`);
        ``order``: the plan's least-carbon pool order, where added instances go first."""
        view = self.view
        t_s = view.now_s
        # A newer plan voids the switch of one still waiting for its instances: run late,
        # that switch drained the newer plan's instances as its surplus (and the newer one
        # then drained the older's), which left an empty fleet that completes nothing.
        self._applied += 1
        self._waiting = None
        applied = self._applied
        want = {p.pool_id: p.instances for p in plan.pools}
        ready_s = start_wanted(view, self.actions.start_instance, want, t_s)
        pending = self._measured(plan)
        caps = {pid: c for pid, c in decisions_clock.items() if c is not None}
        # Cold instances take instance_start_s, and a node's boot before it when it was off.
        delay = ready_s - t_s

        def switch(at_s: float) -> bool:
            if applied != self._applied:
                return False  # superseded: the newer plan switches when its instances are
            self.switching = False
            self.plan = pending
            self._amend, self._order, self._added_log = amend, order, []
            self.clock_caps = caps
            for pool in view.pools:
                _drain_surplus(pool, want.get(pool.pool_id, 0))
            self.actions.count_scale_event()
            self.learned.new_plan()
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


def _drain_surplus(pool: Pool, want: int) -> None:
    """Drain ``pool``'s live instances beyond ``want`` (emptiest nodes first)."""
    live = pool.live()
    for instance in drain_order(live)[: max(0, len(live) - want)]:
        instance.draining = True
