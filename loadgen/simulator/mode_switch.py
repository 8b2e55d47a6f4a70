"""Starting a plan's instances when TP modes share GPUs: make before break where there is room.

With the planner's TP modes (``PolicySet.plan_tps``) a region's GPUs of one type back one
pool per TP degree, so a plan that moves GPUs from one mode to another (TP8 instances to TP4,
or the bootstrap's whole fleet to the first plan) can find no free GPU for its new
instances while the old mode still holds them. Where GPUs are free the new instances start
first and routes switch once they are ready (make before break, as for every plan); where
they are not, just enough of the old mode's surplus instances drain (they finish what they
hold, taking nothing new) to free the GPUs, and the missing instances start as soon as the
GPUs are free. The plan's routes switch when every planned instance is ready.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from loadgen.simulator.nodes import NodeFullError, drain_order

if TYPE_CHECKING:
    from loadgen.simulator.cluster_view import ClusterView
    from loadgen.simulator.instance import SimInstance
    from loadgen.simulator.pools import Pool

__all__ = ["make_room", "missing_instances", "start_wanted"]


def start_wanted(
    cluster: ClusterView,
    start: Callable[[Pool, float], SimInstance | None],
    want: Mapping[str, int],
    t_s: float,
) -> float:
    """Start instances up to ``want`` per pool (draining ones are re-used first, ``start``
    starts a cold one) as far as free GPUs allow; returns when the last started instance is
    ready (``t_s`` if none)."""
    ready_s = t_s
    for pool in cluster.pools:
        target = want.get(pool.pool_id, 0)
        for instance in [i for i in pool.instances if i.draining][
            : max(0, target - len(pool.live()))
        ]:
            instance.draining = False
        while len(pool.live()) < target:
            try:
                started = start(pool, t_s)
            except NodeFullError:
                break
            if started is None:
                break
            ready_s = max(ready_s, started.ready_s)
    return ready_s


def missing_instances(cluster: ClusterView, want: Mapping[str, int]) -> dict[str, int]:
    """Per pool: planned instances not yet started (no free GPUs for them)."""
    return {
        p.pool_id: want.get(p.pool_id, 0) - len(p.live())
        for p in cluster.pools
        if len(p.live()) < want.get(p.pool_id, 0)
    }


def make_room(cluster: ClusterView, want: Mapping[str, int]) -> None:
    """Drain surplus instances (beyond ``want``) of the GPU groups that lack room for the
    missing ones, emptiest nodes first, until their GPUs would cover the missing GPUs."""
    need: dict[tuple[str, str], int] = defaultdict(int)
    for pool_id, count in missing_instances(cluster, want).items():
        pool = cluster.pool_by_id[pool_id]
        need[(pool.region, pool.gpu)] += count * pool.config.tp
    for (region, gpu), gpus in need.items():
        free = sum(n.free_gpus() for n in cluster.nodes.groups.get((region, gpu), []))
        freeing = sum(
            i.gpus for p in cluster.pools for i in p.instances if i.draining and i.region == region
            if p.gpu == gpu
        )  # fmt: skip
        surplus = [
            instance
            for p in cluster.pools
            if p.region == region and p.gpu == gpu
            for instance in drain_order(p.live())[: max(0, len(p.live()) - want.get(p.pool_id, 0))]
        ]
        for instance in drain_order(surplus):
            if free + freeing >= gpus:
                break
            instance.draining = True
            freeing += instance.gpus
