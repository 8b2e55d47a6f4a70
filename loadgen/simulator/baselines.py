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
from shared.domain.classes import scheme_by_name

__all__ = ["Runner", "SizedBaselines", "baseline_gpu", "inventory_slots", "size_baselines"]

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
    gpu: str = ""
    """The GPU type of the homogeneous baselines."""


def inventory_slots(
    scenario: Scenario, tp: int = BASELINE_TP, gpu_type: str | None = None
) -> list[tuple[str, str]]:
    """(region, GPU type) of every TP slot (of ``gpu_type`` if given), in the order a static
    pool fills them."""
    return [
        (region.name, gpu)
        for region in scenario.regions
        for gpu, n in region.gpus.items()
        if gpu_type in (None, gpu)
        for _ in range(n // tp)
    ]


def baseline_gpu(scenario: Scenario, tp: int = BASELINE_TP) -> str:
    """The GPU type with the most TP slots (the first in scenario order on a tie): the
    homogeneous baselines' hardware.

    Raises:
        ValueError: when the inventory holds no TP slot.
    """
    counts: dict[str, int] = {}
    for _, gpu in inventory_slots(scenario, tp):
        counts[gpu] = counts.get(gpu, 0) + 1
    if not counts:
        raise ValueError(f"scenario {scenario.name!r} holds no TP{tp} slot")
    return max(counts, key=lambda gpu: counts[gpu])


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

    SinglePool, MultiPool and the carbon-aware placement use one GPU type, the one with the
    most TP8 slots (:func:`baseline_gpu`); the whole-inventory row uses every GPU.

    Raises:
        ValueError: when the inventory holds no TP8 slot.
    """
    gpu = baseline_gpu(scenario)
    upper = len(inventory_slots(scenario, gpu_type=gpu))
    runs: dict[int, SimResult] = {}

    def single(n: int) -> float:
        runs[n] = run(policy_by_name("single-pool", instances=n, gpu_type=gpu), trace)
        return servable_attainment(runs[n])

    search = smallest_passing(single, upper, goal)
    whole = inventory_slots(scenario)
    full = runs[upper] if upper == len(whole) else run(policy_by_name("single-pool"), trace)
    out = SizedBaselines(single=runs[search.instances], single_search=search, full_fleet=full)
    out.gpu = gpu
    _size_multi(out, scenario, trace, run, goal, measure_from_s, gpu, upper)
    end_s = max((t.t_s for t in trace), default=measure_from_s)
    found = cleanest_region(
        scenario, carbon, (measure_from_s, end_s), gpu, search.instances, tp=BASELINE_TP
    )
    if found is None:
        out.carbon_note = "no single region holds the peak-sized pool"
        return out
    out.carbon_region, out.region_intensity = found
    policy = policy_by_name(
        "single-pool", instances=search.instances, gpu_type=gpu, regions=(out.carbon_region,)
    )
    out.carbon_aware = run(policy, trace)
    return out


def _size_multi(
    out: SizedBaselines,
    scenario: Scenario,
    trace: Sequence[TraceRequest],
    run: Runner,
    goal: float,
    measure_from_s: float,
    gpu: str,
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
            policy = policy_by_name("single-pool", instances=n, gpu_type=gpu)
            return servable_attainment(run(policy, requests))

        out.multi_searches[name] = smallest_passing(attainment, upper, goal, gallop=True)
    sizes = {name: s.instances for name, s in out.multi_searches.items()}
    failed = sorted(name for name, s in out.multi_searches.items() if not s.passed)
    if sum(sizes.values()) > upper:
        out.multi_note = (
            f"MultiPool needs {sum(sizes.values())} TP8 instances, the inventory holds {upper} "
            f"of {gpu}"
        )
        return
    if failed:
        out.multi_note = f"classes {failed} miss the goal even with the whole inventory"
    out.multi = run(policy_by_name("multi-pool", class_instances=sizes, gpu_type=gpu), trace)
