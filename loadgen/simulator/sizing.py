"""Baselines sized as the papers size them: the smallest static pool that meets the SLO.

DynamoLLM's SinglePool is "statically sized for peak": one TP8 pool at maximum clock, FCFS.
Here the size is *found*, not assumed: the smallest number of TP8 instances whose SLO
attainment over the measured window is at least the goal (99 %), each candidate simulated on
that window (so the window's own peak decides). MultiPool is sized the same way per class
(each class's pool alone on that class's requests). The carbon-aware static baseline is the
peak-sized SinglePool placed in the cleanest region that has room for it.

Attainment is assumed non-decreasing in the number of instances (more capacity never hurts
a static FCFS pool at maximum clock), which is what makes a bisection exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.results import SimResult
from loadgen.simulator.scenario import Scenario
from loadgen.traces import TraceRequest
from shared.domain.classes import ClassScheme

__all__ = [
    "CARBON_AWARE_RULE",
    "MULTI_POOL_RULE",
    "SINGLE_POOL_RULE",
    "SizeSearch",
    "cleanest_region",
    "servable_attainment",
    "smallest_passing",
    "split_by_class",
]

SINGLE_POOL_RULE = (
    "SinglePool (DynamoLLM): one TP8 pool at maximum clock, FCFS, round robin, static, on the "
    "GPU type with the most TP8 slots; its size is the smallest number of TP8 instances whose "
    "SLO attainment over the measured window "
    "(requests the model cannot hold excluded) is >= the goal, found by bisection over "
    "1..that type's inventory with every candidate simulated on that window"
)
MULTI_POOL_RULE = (
    "MultiPool (DynamoLLM): one static TP8 pool per class at maximum clock, FCFS, round robin; "
    "each class's size is the smallest number of TP8 instances at which that class's requests "
    "alone meet the goal over the measured window (galloping search, then bisection)"
)
CARBON_AWARE_RULE = (
    "carbon-aware static: the peak-sized SinglePool (same size and GPU type) placed in the "
    "region with the lowest mean measured carbon intensity over the window that holds that "
    "many TP8 slots of that GPU type"
)


@dataclass(slots=True)
class SizeSearch:
    """Where a size search ended and what it measured on the way."""

    instances: int
    """The smallest passing size, or the largest tried when none passed."""
    passed: bool
    probes: dict[int, float] = field(default_factory=dict)
    """Attainment measured at each size tried."""


def servable_attainment(result: SimResult) -> float:
    """SLO attainment over the requests a pool can serve at all.

    A request refused for its size (longer than the model's context, never fits a KV cache,
    no tokens) is refused by every configuration; the summary counts it as a miss, so it is
    taken out here. NaN when nothing was servable.
    """
    servable = result.requests - result.rejected
    if servable <= 0:
        return float("nan")
    met = result.summary.overall.slo_attainment * result.requests
    return min(1.0, met / servable)


def smallest_passing(
    attainment: Callable[[int], float], upper: int, goal: float, *, gallop: bool = False
) -> SizeSearch:
    """Smallest ``n`` in ``1..upper`` with ``attainment(n) >= goal``.

    Without ``gallop`` it tries ``upper`` first, then bisects (about log2(upper) + 1 runs);
    with it, 1, 2, 4, ... first (cheap when small sizes pass), then bisects between the last
    failing and the first passing size. Zero instances serve nothing, so 0 always fails.
    """
    if upper < 1:
        raise ValueError("the inventory holds no instance of this size")
    search = SizeSearch(instances=upper, passed=False)

    def passes(n: int) -> bool:
        if n not in search.probes:
            search.probes[n] = attainment(n)
        value = search.probes[n]
        return value == value and value >= goal  # NaN (nothing servable) fails

    low, high = 0, 0
    if gallop:
        n = 1
        while n < upper and not high:
            if passes(n):
                high = n
            else:
                low, n = n, 2 * n
    if not high:
        if not passes(upper):
            return search
        high = upper
    while high - low > 1:
        middle = (low + high) // 2
        if passes(middle):
            high = middle
        else:
            low = middle
    search.instances, search.passed = high, True
    return search


def split_by_class(
    trace: Sequence[TraceRequest], scheme: ClassScheme
) -> dict[str, list[TraceRequest]]:
    """The trace's requests per class of ``scheme`` (true lengths, as MultiPool's routing
    with the oracle predictor), in time order."""
    out: dict[str, list[TraceRequest]] = {}
    for item in trace:
        if item.prompt_tokens > 0 and item.output_tokens > 0:
            name = scheme.classify(item.prompt_tokens, item.output_tokens)
            out.setdefault(name, []).append(item)
    return dict(sorted(out.items()))


def cleanest_region(
    scenario: Scenario,
    carbon: CarbonClock,
    window_s: tuple[float, float],
    gpu: str,
    slots: int,
    *,
    tp: int = 8,
    step_s: float = 300.0,
) -> tuple[str, dict[str, float]] | None:
    """The region with the lowest mean intensity over ``window_s`` holding ``slots`` TP slots
    of ``gpu``, and every region's mean (gCO2/kWh); ``None`` when no region has the room.

    The mean is of the measured hourly intensity sampled every ``step_s`` (a static placement
    decided with hindsight of the window, as the static baselines' size is).
    """
    start, end = window_s
    times = [start + k * step_s for k in range(max(1, int((end - start) // step_s) + 1))]
    means = {
        r.name: sum(carbon.intensity(r.name, t) for t in times) / len(times)
        for r in scenario.regions
    }
    fitting = [r.name for r in scenario.regions if r.gpus.get(gpu, 0) // tp >= slots]
    if not fitting:
        return None
    return min(fitting, key=lambda name: (means[name], name)), means
