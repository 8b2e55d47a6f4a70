"""Staggered reconfiguration (DynamoLLM §2.3): apply a plan change in waves.

Rules, in order:

- Make before break: a class's instances are stopped only in a wave after all of that class's
  new instances were started, so its capacity never drops below the new plan's.
- Largest saving first: classes are ordered by (power stopped − power started), stops within a
  wave by instance power, as DynamoLLM reconfigures the biggest savers first.
- Waves hold at most ``max_changes_per_wave`` instance changes; starts need free GPUs (GPUs
  of stopped instances free up at the end of their wave).
- If no start fits and no stop is allowed (GPUs held by another class that waits too), the
  first stop in a region and GPU type that a blocked start needs is forced
  (break before make) and ``capacity_dip`` is set.
- Clock-only changes of a pool (:func:`count_transitions`) are re-clocks: raises go in the first
  wave, lowerings in the last (capacity first, savings last).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from services.planner.plan_model import Allocation

__all__ = ["InstanceChange", "StaggeredChanges", "stagger_changes"]


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceChange:
    """One instance started, stopped or re-clocked."""

    action: Literal["start", "stop", "reclock"]
    region: str
    partition: str
    request_class: str
    gpu_type: str
    tensor_parallel: int
    clock_mhz: float | None
    """Clock after the change."""
    gpus: int
    power_w: float
    from_clock_mhz: float | None = None
    """Clock before a re-clock."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StaggeredChanges:
    """Waves to issue one after the other; every change of a wave is issued together."""

    waves: tuple[tuple[InstanceChange, ...], ...]
    capacity_dip: bool


def _unit_changes(
    old: tuple[Allocation, ...], new: tuple[Allocation, ...]
) -> tuple[list[InstanceChange], list[InstanceChange], list[InstanceChange]]:
    """Per-instance starts, stops and re-clocks (pairs of ± at different clocks of a pool)."""
    delta: dict[tuple[object, ...], dict[float | None, tuple[int, Allocation]]] = defaultdict(dict)
    for sign, group in ((-1, old), (1, new)):
        for a in group:
            pool = (a.region, a.gpu_type, a.tensor_parallel, a.partition, a.request_class)
            count, _ = delta[pool].get(a.clock_mhz, (0, a))
            delta[pool][a.clock_mhz] = (count + sign * a.instances, a)
    starts, stops, reclocks = [], [], []
    for by_clock in delta.values():
        ups = [(clk, n, a) for clk, (n, a) in by_clock.items() if n > 0 for _ in range(n)]
        downs = [(clk, -n, a) for clk, (n, a) in by_clock.items() if n < 0 for _ in range(-n)]
        paired = min(len(ups), len(downs))
        for (to_clk, _, a), (from_clk, _, _) in zip(ups[:paired], downs[:paired], strict=True):
            reclocks.append(_change("reclock", a, to_clk, from_clk))
        starts += [_change("start", a, clk) for clk, _, a in ups[paired:]]
        stops += [_change("stop", a, clk) for clk, _, a in downs[paired:]]
    return starts, stops, reclocks


def _change(
    action: Literal["start", "stop", "reclock"],
    a: Allocation,
    clock: float | None,
    from_clock: float | None = None,
) -> InstanceChange:
    return InstanceChange(
        action=action, region=a.region, partition=a.partition, request_class=a.request_class,
        gpu_type=a.gpu_type, tensor_parallel=a.tensor_parallel, clock_mhz=clock,
        gpus=a.gpus_per_instance, power_w=a.power_w, from_clock_mhz=from_clock,
    )  # fmt: skip


def _clock_up(change: InstanceChange) -> bool:
    # None is the GPU's maximum clock.
    new = float("inf") if change.clock_mhz is None else change.clock_mhz
    old = float("inf") if change.from_clock_mhz is None else change.from_clock_mhz
    return new >= old


def stagger_changes(
    old: tuple[Allocation, ...],
    new: tuple[Allocation, ...],
    inventory: Mapping[tuple[str, str], int],
    *,
    max_changes_per_wave: int = 4,
) -> StaggeredChanges:
    """Order the instance changes from ``old`` to ``new`` into waves (see module docstring)."""
    if max_changes_per_wave < 1:
        raise ValueError("max_changes_per_wave must be >= 1")
    starts, stops, reclocks = _unit_changes(old, new)
    saving: dict[tuple[str, str], float] = defaultdict(float)
    for change in stops:
        saving[(change.partition, change.request_class)] += change.power_w
    for change in starts:
        saving[(change.partition, change.request_class)] -= change.power_w

    def order(change: InstanceChange) -> tuple[float, float, str]:
        return (-saving[(change.partition, change.request_class)], -change.power_w, change.region)

    starts.sort(key=order)
    stops.sort(key=order)
    free: dict[tuple[str, str], int] = dict(inventory)
    for a in old:
        free[(a.region, a.gpu_type)] = free.get((a.region, a.gpu_type), 0) - a.gpus
    waves: list[tuple[InstanceChange, ...]] = []
    ups = tuple(c for c in reclocks if _clock_up(c))
    if ups:
        waves.append(ups)
    dip = False
    while starts or stops:
        waiting = {(c.partition, c.request_class) for c in starts}
        wave = [c for c in stops if (c.partition, c.request_class) not in waiting]
        wave = wave[:max_changes_per_wave]
        for change in list(starts):
            key = (change.region, change.gpu_type)
            if len(wave) < max_changes_per_wave and free.get(key, 0) >= change.gpus:
                wave.append(change)
                free[key] -= change.gpus
        if not wave:
            blocked = {(c.region, c.gpu_type) for c in starts}
            forced = next((c for c in stops if (c.region, c.gpu_type) in blocked), None)
            if forced is None:
                raise ValueError("the new allocations do not fit the inventory")
            wave, dip = [forced], True
        for change in wave:
            (starts if change.action == "start" else stops).remove(change)
            if change.action == "stop":
                free[(change.region, change.gpu_type)] += change.gpus
        waves.append(tuple(wave))
    downs = tuple(c for c in reclocks if not _clock_up(c))
    if downs:
        waves.append(downs)
    return StaggeredChanges(waves=tuple(waves), capacity_dip=dip)
