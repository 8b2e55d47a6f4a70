"""What an enforced plan asks: which workers park, and each pool's clock cap. Pure.

A plan's ``PoolPlan.instances`` is the number of a pool's workers that should serve. The
workers of a pool rank themselves by worker id (natural order: ``worker-2`` before
``worker-10``) among the pool members whose heartbeat they saw recently; a worker ranked at
or beyond ``instances`` parks: it refuses new dispatches (like draining), finishes what it
has, and idles. DynamoLLM would shut such an instance down; the simulated GPU cannot be
powered off, so a parked worker still draws its idle power (``GpuSpec.idle_w`` × TP in the
engine model: 63 W per A100, 75 W per H100) — the saving of parking in the simulator is the
gap between serving and idle power, not the whole instance.

Only plans the MILP made (objective ``carbon`` or ``energy``) are enforced. Static and
bootstrap plans describe the fleet without asking anyone to park, so stacks that never run
the MILP keep every worker serving whatever their static instance counts say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from proto.messages import Plan, WorkerStats

__all__ = [
    "ENFORCED_OBJECTIVES",
    "PlanFollower",
    "parked_workers",
    "plan_is_enforced",
    "pool_clock_caps",
    "worker_order",
]

ENFORCED_OBJECTIVES: Final = frozenset({"carbon", "energy"})
"""Objectives of MILP plans, whose instance counts and clocks workers follow."""


def worker_order(worker_id: str) -> tuple[tuple[int, int | str], ...]:
    """Natural sort key of a worker id (``worker-2`` before ``worker-10``)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part)
        for part in re.split(r"(\d+)", worker_id)
        if part
    )


def plan_is_enforced(plan: Plan) -> bool:
    """Whether workers park and dvfs agents cap clocks by this plan."""
    return plan.objective in ENFORCED_OBJECTIVES


def parked_workers(members: Iterable[str], instances: int) -> set[str]:
    """The members ranked at or beyond ``instances`` (by natural worker-id order)."""
    ranked = sorted(set(members), key=worker_order)
    return set(ranked[max(0, instances) :])


def pool_clock_caps(plan: Plan) -> dict[str, float]:
    """Planned clock per pool of an enforced plan (pools at maximum clock are absent)."""
    if not plan_is_enforced(plan):
        return {}
    return {p.pool_id: p.clock_mhz for p in plan.pools if p.clock_mhz is not None}


class PlanFollower:
    """One worker's view of the plan and of its pool's members."""

    def __init__(self, worker_id: str, pool_id: str, member_ttl_s: float) -> None:
        """Follow the plan for ``worker_id`` of ``pool_id``; peers expire after the TTL."""
        self._worker_id = worker_id
        self._pool_id = pool_id
        self._ttl_s = member_ttl_s
        self._plan: Plan | None = None
        self._peers: dict[str, float] = {}

    def on_plan(self, plan: Plan) -> None:
        """Take a newer plan."""
        self._plan = plan

    def on_peer(self, stats: WorkerStats, now_wall: float) -> None:
        """Note a heartbeat of a worker (only those of this pool count)."""
        if stats.pool_id == self._pool_id and stats.worker_id != self._worker_id:
            self._peers[stats.worker_id] = now_wall

    def planned_instances(self) -> int | None:
        """Instances the enforced plan gives this pool; ``None`` when nothing is enforced."""
        plan = self._plan
        if plan is None or not plan_is_enforced(plan):
            return None
        return next((p.instances for p in plan.pools if p.pool_id == self._pool_id), None)

    def parked(self, now_wall: float) -> bool:
        """Whether this worker should park now."""
        instances = self.planned_instances()
        if instances is None:
            return False
        for worker_id, seen in list(self._peers.items()):
            if now_wall - seen > self._ttl_s:
                del self._peers[worker_id]
        return self._worker_id in parked_workers([self._worker_id, *self._peers], instances)
