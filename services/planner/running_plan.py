"""The plan in force for one model, and where SLO feedback may add an instance to it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from services.planner.live_inputs import LivePool
from services.planner.live_plan import PoolDecision
from services.planner.plan_model import Plan as CorePlan
from services.planner.slo_feedback import growth_hosts

__all__ = ["RunningPlan", "growth_hosts_of"]


@dataclass(slots=True)
class RunningPlan:
    """The plan in force, in the forms the gate and the republisher need."""

    core: CorePlan
    decisions: dict[str, PoolDecision]
    pools: dict[str, LivePool]
    fallback_order: tuple[str, ...]
    class_groups: dict[str, str]
    epoch: int = -1
    """The epoch it was planned in (a re-plan of the same epoch may only add to it)."""


def growth_hosts_of(
    running: RunningPlan, added: Sequence[tuple[str, str]]
) -> dict[str, tuple[str, ...]]:
    """Per planned pool of ``running``: where one more instance for it can go
    (``growth_hosts``): its parked workers first, else a pool of its GPU type, TP and model
    elsewhere that serves none of the other class groups' classes."""
    taken = Counter(host for _, host in added)
    room = {
        pid: len(pool.workers)
        - (running.decisions[pid].instances if pid in running.decisions else 0)
        - taken[pid]
        for pid, pool in running.pools.items()
    }

    def groups(pid: str) -> frozenset[str]:
        d = running.decisions.get(pid)
        if d is None or d.instances <= 0:
            return frozenset()
        served = (c for c, qps in d.capacity_by_class.items() if qps > 0)
        return frozenset(running.class_groups.get(c, "") for c in served)

    out: dict[str, tuple[str, ...]] = {}
    for short, d in running.decisions.items():
        if d.instances <= 0:
            continue
        mine = groups(short)
        modes = {
            pid: (pool.gpu, pool.tp, pool.model, groups(pid) or mine)
            for pid, pool in running.pools.items()
        }
        out[short] = growth_hosts(short, modes, room, running.fallback_order)
    return out
