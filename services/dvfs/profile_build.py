"""Build the instance profile DynamoLLM's instance manager chooses clocks from.

DynamoLLM §3.1 (seed 001): the profile is swept once per model, over SM clocks in 200-MHz
steps up to the maximum and "a few load levels up to maximum throughput", each point a
short constant-load run; the instance manager (:mod:`services.dvfs.profile_policy`) reads
energy, P99 TTFT and P99 TBT from it (and P99 E2E, for GreenServe's E2E bound). Here every
point is one open-loop Poisson run of the request class on a fresh engine
(:class:`shared.engine.profile_sim.SimulatedProfileBackend`, the planner profiler's
backend), so a profile costs one engine simulation per (load, clock).

What is ours: the load levels are evenly spaced shares of the class's throughput bound at
the highest clock (DynamoLLM does not list its levels), and a point whose run did not finish
every measured request keeps an infinite TTFT and E2E, so no clock is chosen for a load it
cannot carry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from services.dvfs.profile_policy import ProfilePoint, ProfileTable
from shared.engine import EngineConfig
from shared.engine.hardware import gpu_spec
from shared.engine.profile_sim import SimulatedProfileBackend, SimWindow
from shared.engine.profiler import LoadMeasurement, ProfileTarget, RequestClass

__all__ = [
    "DYNAMOLLM_CLOCK_STEP_MHZ",
    "ProfileGrid",
    "build_profile_table",
    "profile_clocks",
    "profile_of_lengths",
]

DYNAMOLLM_CLOCK_STEP_MHZ: Final = 200.0
"""DynamoLLM §3.1: 800–1980 MHz in 200-MHz steps on the H100."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileGrid:
    """Which loads and clocks a profile covers."""

    load_shares: Sequence[float] = (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)
    """Loads as shares of the class's throughput bound at the highest clock."""
    quantile: float = 0.99
    """The latency percentile kept per point (DynamoLLM profiles P99 TTFT and TBT)."""
    window: SimWindow = field(default_factory=lambda: SimWindow(window_s=60.0, drain_s=60.0))
    """Each point's run (engine time): one minute of arrivals, at most one more to drain."""


def profile_clocks(supported_mhz: Sequence[float]) -> tuple[float, ...]:
    """DynamoLLM's clock levels on a GPU: 200-MHz steps down from its highest clock.

    DynamoLLM stops at 800 MHz on the H100; here the steps go down to the GPU's lowest
    clock, the range MIAD and predictive control search too, so the bench compares the
    policies over the same clocks. Each level is snapped to the nearest supported clock.
    """
    top, bottom = max(supported_mhz), min(supported_mhz)
    levels = []
    target = top
    while target >= bottom - 1e-9:
        levels.append(min(supported_mhz, key=lambda c: abs(c - target)))
        target -= DYNAMOLLM_CLOCK_STEP_MHZ
    return tuple(sorted(set(levels)))


def _quantile(values: Sequence[float], q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=np.float64), q)) if values else math.inf


def _point(measurement: LoadMeasurement, load_rps: float, clock: float, q: float) -> ProfilePoint:
    finished = measurement.unfinished == 0
    return ProfilePoint(
        load_rps=load_rps,
        clock_mhz=clock,
        energy_j=measurement.power_w,
        ttft_s=_quantile(measurement.ttft_s, q) if finished else math.inf,
        tbt_s=_quantile(measurement.tbt_s, q),
        e2e_s=_quantile(measurement.e2e_s, q) if finished else math.inf,
    )


def build_profile_table(
    config: EngineConfig,
    request_class: RequestClass,
    *,
    grid: ProfileGrid | None = None,
    backend: SimulatedProfileBackend | None = None,
) -> ProfileTable:
    """Sweep ``request_class`` over loads × clocks on ``config``'s engine.

    Energy is the instance's mean power at that load (joules per second: the policy only
    compares clocks at one load, so the rate is what matters).

    Raises:
        shared.engine.profiler.UnsupportedTargetError: the model does not fit ``config``.
    """
    grid = grid or ProfileGrid()
    backend = backend or SimulatedProfileBackend(
        window=grid.window,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
    )
    spec = gpu_spec(config.gpu)
    clocks = profile_clocks(spec.supported_clocks_mhz)
    top = ProfileTarget(gpu_type=config.gpu, tp=config.tp, model=config.model)
    bound = backend.capacity_qps(top, request_class)
    points = []
    for share in grid.load_shares:
        load = share * bound
        for clock in clocks:
            target = ProfileTarget(
                gpu_type=config.gpu, tp=config.tp, model=config.model, clock_mhz=clock
            )
            measured = backend.measure(target, request_class, load)
            points.append(_point(measured, load, clock, grid.quantile))
    return ProfileTable(points)


def profile_of_lengths(
    config: EngineConfig,
    prompts: Sequence[int],
    outputs: Sequence[int],
    *,
    partition: str,
    name: str,
) -> ProfileTable:
    """Sweep the profile of requests drawn from these prompt and output lengths.

    ``partition`` and ``name`` name the request class, and so seed the profile's draws.
    """
    request_class = RequestClass(
        partition=partition, name=name, prompt_tokens=tuple(prompts), output_tokens=tuple(outputs)
    )
    return build_profile_table(config, request_class)
