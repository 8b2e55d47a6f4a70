"""The reactive scaler of the simulator's ``scaling="reactive"`` sets: a share of each
instance's batch slots as the target, cut on SLO misses and restored a step per period.

Every scale period it sizes the fleet for the period's peak of outstanding requests at the
current share (:func:`~loadgen.simulator.policy_set.instances_needed`); every sample it adds
instances when the misses of its window exceed the goal (cutting the share) or when the
outstanding requests exceed ``scale_out_share`` of the live slots. Pools fill in carbon
order when the policy chooses regions by carbon.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen.simulator.cluster_view import ClusterActions, ControlView
from loadgen.simulator.nodes import drain_order
from loadgen.simulator.policy_set import instances_needed

__all__ = ["ReactiveScaler"]


class ReactiveScaler:
    """One simulation's reactive scaling state and its two steps."""

    def __init__(
        self,
        view: ControlView,
        actions: ClusterActions,
        new_instance: Callable[[Any, float], object],
        count_scale_event: Callable[[], None],
    ) -> None:
        """Scale ``view``'s pools through ``actions``, starting cold instances with
        ``new_instance(pool, t_s)`` and counting each change with ``count_scale_event``."""
        self.view = view
        self.actions = actions
        self._new_instance = new_instance
        self._count_scale_event = count_scale_event
        self.share = view.policy.scaler.target_share
        self._peak_load = 0
        self._window_done = 0
        self._window_missed = 0
        self._cut_this_period = False

    def on_arrival(self) -> None:
        """Track the peak load the next period sizes for."""
        if self.view.outstanding > self._peak_load:
            self._peak_load = self.view.outstanding

    def on_finish(self, *, missed: bool) -> None:
        """Count one finished request in the miss window."""
        self._window_done += 1
        self._window_missed += missed

    def scale_out_if_congested(self, t_s: float) -> None:
        """Add instances after a window over the miss goal, or when slots run short."""
        view = self.view
        settings = view.policy.scaler
        done, missed = self._window_done, self._window_missed
        if done >= settings.min_window_requests:
            self._window_done = self._window_missed = 0
            if missed > (1.0 - settings.slo_goal) * done:
                self.share = max(settings.min_share, self.share * settings.share_decrease)
                self._cut_this_period = True
                self._resize(self._needed(view.outstanding), t_s, grow_only=True)
                return
        slots = sum(len(p.live()) for p in view.pools) * view.max_num_seqs
        if view.outstanding > settings.scale_out_share * slots:
            self._resize(self._needed(view.outstanding), t_s, grow_only=True)

    def tick(self, t_s: float) -> bool:
        """The scale period: restore the share a step unless it was cut, size for the peak."""
        view = self.view
        settings = view.policy.scaler
        if not self._cut_this_period:
            self.share = min(settings.target_share, self.share + settings.share_increase)
        self._cut_this_period = False
        target = self._needed(self._peak_load)
        self._peak_load = view.outstanding
        self._resize(target, t_s, grow_only=False)
        self.actions.schedule_tick(t_s + view.scenario.control.scale_period_s, self.tick)
        return False

    def _needed(self, load: float) -> int:
        view = self.view
        return instances_needed(load, view.max_num_seqs, view.policy.scaler, self.share)

    def _pool_order(self, t_s: float) -> list[Any]:
        view = self.view
        if view.policy.region_choice != "carbon":
            return list(view.pools)
        return sorted(view.pools, key=lambda p: (view.carbon.forecast(p.region, t_s), p.pool_id))

    def _resize(self, target: int, t_s: float, *, grow_only: bool) -> None:
        """Fill pools in carbon order up to ``target`` live instances; drain the rest."""
        left = target
        changed = False
        for pool in self._pool_order(t_s):
            want = min(left, pool.max_instances)
            left -= want
            live = pool.live()
            if len(live) < want:
                # Re-use draining (still warm) instances before starting cold ones.
                for instance in [i for i in pool.instances if i.draining][: want - len(live)]:
                    instance.draining = False
                    changed = True
                for _ in range(want - len(pool.live())):
                    self._new_instance(pool, t_s)
                    changed = True
            elif len(live) > want and not grow_only:
                for instance in drain_order(live)[: len(live) - want]:
                    instance.draining = True
                    changed = True
        if changed:
            self._count_scale_event()
            self.actions.update_routes(t_s)
            self.actions.resteer_orphans(t_s)
