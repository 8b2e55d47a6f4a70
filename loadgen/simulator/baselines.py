"""The papers' static baselines, sized on the same engine and window as the policy they judge.

:func:`size_baselines` runs the searches of :mod:`loadgen.simulator.sizing`: the peak-sized
SinglePool (the savings' reference), the whole inventory always on (a secondary, labelled
row: it is the first size the bisection tries), MultiPool sized per class, and the
carbon-aware static placement of the peak-sized pool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.policies import PolicySet, policy_by_name
from loadgen.simulator.results import SimResult
from loadgen.simulator.scenario import Scenario
from loadgen.simulator.sizing import (
    SizeSearch,
    cleanest_region,
    servable_attainment,
    smallest_passing,
    split_by_class,
)
from loadgen.traces import TraceRequest
from services.classifier.classes import scheme_by_name

__all__ = ["Runner", "SizedBaselines", "inventory_slots", "size_baselines"]

Runner = Callable[[PolicySet, Sequence[TraceRequest]], SimResult]
"""Simulates one policy set on a trace over the measured window."""

BASELINE_TP = 8
"""DynamoLLM's baselines run every instance at TP8 (one DGX node each)."""


@dataclass(slots=True)
class SizedBaselines:
    """Every sized baseline's run, and how its size was found."""

    single: SimResult
    single_search: SizeSearch
    full_fleet: SimResult
    multi: SimResult | None = None
    multi_searches: dict[str, SizeSearch] = field(default_factory=dict)
    multi_note: str = ""
    carbon_aware: SimResult | None = None
    carbon_region: str | None = None
    region_intensity: dict[str, float] = field(default_factory=dict)
    carbon_note: str = ""


def inventory_slots(scenario: Scenario, tp: int = BASELINE_TP) -> list[tuple[str, str]]:
    """(region, GPU type) of every TP slot, in the order a static pool fills them."""
    return [
        (region.name, gpu)
        for region in scenario.regions
        for gpu, n in region.gpus.items()
        for _ in range(n // tp)
    ]


def size_baselines(
    scenario: Scenario,
    trace: Sequence[TraceRequest],
    run: Runner,
    *,
    goal: float,
    measure_from_s: float,
    carbon: CarbonClock,
) -> SizedBaselines:
    """Find and run every static baseline on ``trace`` (measured from ``measure_from_s``).

    Raises:
        ValueError: when the inventory holds no TP8 slot.
    """
    slots = inventory_slots(scenario)
    base = policy_by_name("single-pool")
    runs: dict[int, SimResult] = {}

    def single(n: int) -> float:
        runs[n] = run(policy_by_name("single-pool", instances=n), trace)
        return servable_attainment(runs[n])

    search = smallest_passing(single, len(slots), goal)
    out = SizedBaselines(
        single=runs[search.instances], single_search=search, full_fleet=runs[len(slots)]
    )
    _size_multi(out, scenario, trace, run, goal, measure_from_s, len(slots))
    gpus = {gpu for _, gpu in slots[: search.instances]}
    end_s = max((t.t_s for t in trace), default=measure_from_s)
    if len(gpus) != 1:
        out.carbon_note = f"the peak-sized pool spans GPU types {sorted(gpus)}"
        return out
    found = cleanest_region(
        scenario, carbon, (measure_from_s, end_s), gpus.pop(), search.instances, tp=base.tp
    )
    if found is None:
        out.carbon_note = "no single region holds the peak-sized pool"
        return out
    out.carbon_region, out.region_intensity = found
    out.carbon_aware = run(
        policy_by_name("single-pool", instances=search.instances, regions=(out.carbon_region,)),
        trace,
    )
    return out


def _size_multi(
    out: SizedBaselines,
    scenario: Scenario,
    trace: Sequence[TraceRequest],
    run: Runner,
    goal: float,
    measure_from_s: float,
    upper: int,
) -> None:
    """Size each class's pool on that class's requests alone, then run MultiPool at those
    sizes when the inventory holds them."""
    scheme = scheme_by_name(scenario.slo.scheme)
    for name, requests in split_by_class(trace, scheme).items():
        if not any(t.t_s >= measure_from_s for t in requests):
            # Only warm-up traffic: the smallest pool there is, nothing to measure.
            out.multi_searches[name] = SizeSearch(instances=1, passed=True)
            continue

        def attainment(n: int, requests: Sequence[TraceRequest] = requests) -> float:
            return servable_attainment(run(policy_by_name("single-pool", instances=n), requests))

        out.multi_searches[name] = smallest_passing(attainment, upper, goal, gallop=True)
    sizes = {name: s.instances for name, s in out.multi_searches.items()}
    failed = sorted(name for name, s in out.multi_searches.items() if not s.passed)
    if sum(sizes.values()) > upper:
        out.multi_note = (
            f"MultiPool needs {sum(sizes.values())} TP8 instances, the inventory holds {upper}"
        )
        return
    if failed:
        out.multi_note = f"classes {failed} miss the goal even with the whole inventory"
    out.multi = run(policy_by_name("multi-pool", class_instances=sizes), trace)
