"""MIAD against the request classes' SLOs: the product's default clock control.

FREESH's MIAD (:mod:`services.dvfs.miad`) judges congestion against its Table 7 thresholds
and floors the clock at ≈300 MHz. GreenServe's default runs the same Eq. 5a/5b with three
guard rails, one definition for the live DVFS agent and the simulator's headline:

* **a guard band**: congestion is a class's TTFT or mean TBT over ``guard`` × its SLO (the
  classifier's scheme and SLOs, not Table 7's four types), so the clock rises before a
  request misses rather than after;
* **no decrease on no evidence**: a period with nothing running, waiting or measured keeps
  the clock (Eq. 5b would walk an idle instance to the floor, where the next burst's long
  prefills start; measured on the code trace: the misses of its first burst after two idle
  minutes, `docs/simulator.md`);
* **an SLO clock floor**: MIAD never goes below the lowest clock at which a lone request
  at each bounded input bucket's longest prompt reaches its first token within ``guard`` ×
  the bucket's TTFT SLO (:func:`slo_clock_floor_mhz`, on the engine model). A pool sent
  the open-ended long-input bucket also floors at that bucket's observed p99 prompt
  (``open_prompt``): how long the long prompts are is known only once served, so until
  the served sample is trusted such a pool floors at the maximum clock
  (:func:`served_floor_mhz`).

The plan's clock caps MIAD, but never below the floor (:func:`capped_clock`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from services.dvfs.controller import SloThresholds
from services.dvfs.miad import FREESH_MIN_CLOCK_MHZ, MiadConfig
from shared.domain.classes import ClassScheme, ClassSLO
from shared.engine import EngineConfig, EngineRequest, create_engine

__all__ = [
    "capped_clock",
    "miad_floor_mhz",
    "served_floor_mhz",
    "serves_open_input",
    "slo_clock_floor_mhz",
    "slo_miad_config",
    "slo_thresholds",
]


def slo_thresholds(slos: Mapping[str, ClassSLO], guard: float) -> dict[str, SloThresholds]:
    """Congestion thresholds per class: ``guard`` × its TTFT and TBT SLO.

    E2E has no class-wide bound (it is per request, 5·Lat), so only TTFT and TBT signal.
    """
    if not 0.0 < guard <= 1.0:
        raise ValueError(f"guard must be in (0, 1], got {guard}")
    scale = guard / 1000.0
    return {
        name: SloThresholds(ttft_s=s.ttft_ms * scale, tbt_s=s.tbt_ms * scale, e2e_s=math.inf)
        for name, s in slos.items()
    }


def slo_miad_config(
    slos: Mapping[str, ClassSLO],
    *,
    guard: float,
    floor_mhz: float,
    period_s: float,
    max_clock_mhz: float | None = None,
    queue_triggers: bool = False,
    hold_when_idle: bool = True,
) -> MiadConfig:
    """FREESH's MIAD (M = 2, δ = 100 MHz) with the class thresholds and the SLO floor,
    holding the clock while the instance is idle (:attr:`MiadConfig.hold_when_idle`)."""
    if not slos:
        raise ValueError("MIAD against the SLOs needs at least one class SLO")
    return MiadConfig(
        min_clock_mhz=floor_mhz,
        max_clock_mhz=max_clock_mhz,
        period_s=period_s,
        thresholds=slo_thresholds(slos, guard),
        default_type=next(iter(slos)),
        queue_triggers=queue_triggers,
        hold_when_idle=hold_when_idle,
    )


def capped_clock(
    decided_mhz: float,
    *,
    cap_mhz: float | None,
    floor_mhz: float,
    served_floor_mhz: float = 0.0,
) -> float:
    """MIAD's choice under the plan's clock cap (never below MIAD's own floor), raised to
    the floor of the long prompts the pool is served (``served_floor_mhz``)."""
    if cap_mhz is not None:
        decided_mhz = min(decided_mhz, max(cap_mhz, floor_mhz))
    return max(decided_mhz, served_floor_mhz)


def serves_open_input(classes: Sequence[str], scheme: ClassScheme) -> bool:
    """Whether a pool routed ``classes`` takes the open-ended last input bucket (all
    classes, ``[]`` or ``*``, count as taking it)."""
    if not classes or "*" in classes:
        return True
    last = scheme.labels[len(scheme.input_edges)]
    return any(c.startswith(last) for c in classes)


@functools.lru_cache(maxsize=64)
def _max_clock_mhz(config: EngineConfig) -> float:
    return max(create_engine(config).supported_clocks_mhz)


def served_floor_mhz(
    config: EngineConfig,
    scheme: ClassScheme,
    slos: Mapping[str, ClassSLO],
    guard: float,
    *,
    serves_open: bool,
    sample_trusted: bool,
    open_prompt: int | None,
    max_clock_mhz: float | None = None,
) -> float:
    """The clock floor of the long prompts a pool is sent (0 when it is sent none).

    A pool sent the open-ended input bucket floors at the clock that serves that bucket's
    observed p99 prompt (``open_prompt``, :func:`slo_clock_floor_mhz`). Before the served
    sample is trusted (``sample_trusted``: a cold start) the floor is the maximum clock
    (``max_clock_mhz`` where the agent is capped below the GPU's): a long prompt may be of
    any length, and MIAD's walk down under a light load is no evidence about the next
    burst's prefills (on the code trace, whose first burst comes after two idle minutes and
    63 requests, its long prompts met clocks of 360-750 MHz). A trusted sample with too few
    long prompts for a p99 (``open_prompt`` None) says they are rare: no floor.
    """
    if not serves_open:
        return 0.0
    if open_prompt is not None:
        return slo_clock_floor_mhz(config, scheme, slos, guard, open_prompt=open_prompt)
    if sample_trusted:
        return 0.0
    top = _max_clock_mhz(config)
    return top if max_clock_mhz is None else min(top, max_clock_mhz)


def _lone_ttft_s(config: EngineConfig, prompt: int, clock_mhz: float) -> float:
    engine = create_engine(replace(config, clock_mhz=clock_mhz))
    engine.add(EngineRequest(request_id="floor", prompt_tokens=prompt, output_tokens=1))
    while (result := engine.step()) is not None:
        if result.emitted:
            return result.start_s + result.duration_s
    return math.inf


@functools.lru_cache(maxsize=256)
def _floor_cached(config: EngineConfig, needs: tuple[tuple[int, float], ...]) -> float:
    clocks = create_engine(config).supported_clocks_mhz

    def feasible(clock: float) -> bool:
        return all(_lone_ttft_s(config, prompt, clock) <= budget for prompt, budget in needs)

    low, high = 0, len(clocks) - 1
    if not feasible(clocks[high]):
        return clocks[high]
    while low < high:
        middle = (low + high) // 2
        if feasible(clocks[middle]):
            high = middle
        else:
            low = middle + 1
    return clocks[high]


def slo_clock_floor_mhz(
    config: EngineConfig,
    scheme: ClassScheme,
    slos: Mapping[str, ClassSLO],
    guard: float,
    open_prompt: int | None = None,
) -> float:
    """Lowest clock at which a lone request meets ``guard`` × its TTFT SLO in every bounded
    input class (and, given ``open_prompt``, in the open-ended last one).

    For each input bucket with an upper edge (DynamoLLM S < 256, M < 1024 tokens) the
    longest prompt of the bucket must reach its first token within ``guard`` × the bucket's
    TTFT SLO (the tightest over its output buckets) when it runs alone on ``config``; the
    last bucket has no longest prompt, so ``open_prompt`` stands for it (the observed p99
    there). Binary search over the supported clocks (prefill time falls monotonically with
    clock); the maximum clock when even it is too slow. Cached per (engine, needs).
    """
    needs: list[tuple[int, float]] = []
    bounds = [edge - 1 for edge in scheme.input_edges]
    if open_prompt is not None:
        bounds.append(open_prompt)
    for index, prompt in enumerate(bounds):
        label = scheme.labels[index]
        budgets = [slos[label + out].ttft_ms for out in scheme.labels if label + out in slos]
        if budgets:
            needs.append((prompt, guard * min(budgets) / 1000.0))
    return _floor_cached(config, tuple(needs))


def miad_floor_mhz(
    config: EngineConfig,
    scheme: ClassScheme,
    slos: Mapping[str, ClassSLO],
    guard: float,
    *,
    slo_floor: bool,
) -> float:
    """MIAD's f_min: the SLO clock floor, or FREESH's ≈300 MHz without ``slo_floor``."""
    if not slo_floor:
        return FREESH_MIN_CLOCK_MHZ
    return slo_clock_floor_mhz(config, scheme, slos, guard)
