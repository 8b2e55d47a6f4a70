"""Profile-based clock choice: DynamoLLM's instance manager (seed 001 §2.4), every 5 s.

From a profile of the instance (load × clock → energy, TTFT, TBT), interpolate every
profiled clock's row at the measured load (DynamoLLM interpolates loads with SciPy
``interp1d``; linear interpolation is the same here), drop the clocks whose TTFT or TBT
breaks the SLO, and pick the one with the least energy. When no clock meets the SLO the
highest clock is the best effort. GreenServe's extension: the profile may also carry the
P99 E2E of each point and the SLO an E2E bound (DynamoLLM filters on TTFT and TBT only;
without the bound, ``e2e_slo_s = inf``, the policy is the published one).
Loads beyond the profile are clamped to its ends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import NDArray

from services.dvfs.controller import Observation, snap_clock

__all__ = [
    "DEFAULT_EMERGENCY_SHARE",
    "DYNAMOLLM_PERIOD_S",
    "ProfilePoint",
    "ProfilePolicy",
    "ProfilePolicyConfig",
    "ProfileTable",
]

DYNAMOLLM_PERIOD_S: Final = 5.0
"""DynamoLLM's instance manager re-chooses the clock every 5 s (seed 001 §2.4)."""
DEFAULT_EMERGENCY_SHARE: Final = 0.9
"""Our detector for DynamoLLM's "SLO miss imminent" (§4.4 leaves it open): a request of the
last period within 10 % of a bound. Chosen before any run, not tuned on the benches."""

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfilePoint:
    """One profiled operating point of an instance."""

    load_rps: float
    clock_mhz: float
    energy_j: float
    """Energy of the instance over the profiling run (or per second: only order matters)."""
    ttft_s: float
    tbt_s: float
    e2e_s: float = 0.0
    """End-to-end latency at that point (0: not profiled; only an E2E bound reads it)."""


class ProfileTable:
    """Profiled points on a load × clock grid (every clock at every load)."""

    def __init__(self, points: Sequence[ProfilePoint]) -> None:
        """Index the points.

        Raises:
            ValueError: when the points do not form a complete load × clock grid.
        """
        loads = sorted({p.load_rps for p in points})
        clocks = sorted({p.clock_mhz for p in points})
        if not loads or len(points) != len(loads) * len(clocks):
            raise ValueError("profile points must cover every load at every clock exactly once")
        grid = np.full((4, len(clocks), len(loads)), np.nan)
        for p in points:
            row, col = clocks.index(p.clock_mhz), loads.index(p.load_rps)
            grid[:, row, col] = (p.energy_j, p.ttft_s, p.tbt_s, p.e2e_s)
        if np.isnan(grid).any():
            raise ValueError("profile points must cover every load at every clock exactly once")
        self._loads = np.asarray(loads, dtype=np.float64)
        self._clocks = tuple(clocks)
        self._grid = grid

    @property
    def clocks_mhz(self) -> tuple[float, ...]:
        """Profiled clocks, ascending."""
        return self._clocks

    @property
    def loads_rps(self) -> tuple[float, ...]:
        """Profiled loads, ascending."""
        return tuple(float(load) for load in self._loads)

    def at_load(self, load_rps: float) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Return (energy, TTFT, TBT) per profiled clock, interpolated at ``load_rps``."""
        energy, ttft, tbt = (
            np.array([np.interp(load_rps, self._loads, row) for row in self._grid[k]])
            for k in range(3)
        )
        return energy, ttft, tbt

    def e2e_at_load(self, load_rps: float) -> FloatArray:
        """Return the E2E latency per profiled clock, interpolated at ``load_rps``."""
        return np.array([np.interp(load_rps, self._loads, row) for row in self._grid[3]])


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfilePolicyConfig:
    """SLO and period of the profile policy (DynamoLLM: 5 s)."""

    ttft_slo_s: float
    tbt_slo_s: float
    period_s: float = DYNAMOLLM_PERIOD_S
    load_headroom: float = 1.0
    """Multiplies the measured load before the lookup (>1 plans for growth)."""
    e2e_slo_s: float = math.inf
    """GreenServe's extension: also drop clocks whose profiled E2E exceeds this."""
    emergency_share: float = math.inf
    """DynamoLLM §4.4, step 2 of its emergency ladder: the maximum clock for the next
    period when a miss is imminent. The paper leaves the detector open; ours: a request of
    the last period whose TTFT, mean TBT or E2E exceeded this share of its bound (a bound
    that is infinite never fires). ``inf``: no emergencies."""
    class_bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Per request class, its own (TTFT, TBT) bounds for the emergency check; a class not
    listed is held to ``ttft_slo_s`` and ``tbt_slo_s``."""


class ProfilePolicy:
    """Filter profiled clocks by SLO at the measured load, then take the least energy."""

    def __init__(self, table: ProfileTable, config: ProfilePolicyConfig) -> None:
        """Use ``table`` (this instance's profile) under ``config``'s SLO."""
        self._table = table
        self._config = config

    @property
    def config(self) -> ProfilePolicyConfig:
        """The SLO, period and emergency settings."""
        return self._config

    @property
    def table(self) -> ProfileTable:
        """The profile it chooses from."""
        return self._table

    @property
    def period_s(self) -> float:
        """The control period."""
        return self._config.period_s

    def choose_clock(self, load_rps: float) -> float:
        """Return the profiled clock with least energy among those meeting the SLO."""
        load = load_rps * self._config.load_headroom
        energy, ttft, tbt = self._table.at_load(load)
        feasible = (ttft <= self._config.ttft_slo_s) & (tbt <= self._config.tbt_slo_s)
        if math.isfinite(self._config.e2e_slo_s):
            feasible &= self._table.e2e_at_load(load) <= self._config.e2e_slo_s
        if not feasible.any():
            return self._table.clocks_mhz[-1]
        candidates = np.flatnonzero(feasible)
        return self._table.clocks_mhz[int(candidates[np.argmin(energy[candidates])])]

    def emergency(self, observation: Observation) -> bool:
        """Whether the last period saw a request near a bound (``emergency_share``)."""
        cfg = self._config
        share = cfg.emergency_share
        if not math.isfinite(share):
            return False
        for name, window in observation.latencies.items():
            ttft_bound, tbt_bound = cfg.class_bounds.get(name, (cfg.ttft_slo_s, cfg.tbt_slo_s))
            for samples, bound in (
                (window.ttft_s, ttft_bound),
                (window.tbt_s, tbt_bound),
                (window.e2e_s, cfg.e2e_slo_s),
            ):
                if max(samples, default=0.0) > share * bound:
                    return True
        return False

    def decide(self, observation: Observation) -> float:
        """Choose by the load of the last period and snap to a supported clock; the maximum
        clock in an emergency."""
        if self.emergency(observation):
            return observation.max_clock_mhz
        chosen = self.choose_clock(observation.arrival_rate_rps)
        return snap_clock(chosen, observation.supported_clocks_mhz)
