"""MIAD clock control: multiplicative increase on congestion, additive decrease otherwise.

FREESH §2.3, Eq. 5a/5b, every 1 s per TP instance::

    congested:      f ← min(M · f, f_max)     (5a)
    not congested:  f ← max(f − δ, f_min)     (5b)

with M = 2.0, δ = 100 MHz (the setting FREESH App. D.7 / Table 10 chose) and
f ∈ [≈300 MHz, f_max]. Congestion is judged per request type against the FREESH Table 7
thresholds. The paper leaves open how the samples of one period are reduced before the
comparison; that reduction is :attr:`MiadConfig.aggregation` (default ``"max"``: any request
over any threshold, the literal reading of "any latency metric observed exceeds").
μ-Serve's per-GPU MIAD (seed 004 §2, Alg. 3) is not this controller: it raises ×2 when any
partition's slack (SLO − latency)/SLO falls below 0.05, lowers by STEP only when the linear
model's predicted degradation fits within every partition's slack − 0.05, and otherwise
holds the clock; only FREESH's two-way Eq. 5a/5b is implemented here, one controller per
instance.

The controller keeps its own unsnapped target so that −100 MHz steps are not eaten by
snapping to the GPU's 15 MHz grid; it resynchronises when another actor (planner,
emergency ladder) moved the clock, i.e. when the observed clock is not the one it applied
last (its own rounding into [f_min, f_max] on the grid is not such a move).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np

from services.dvfs.controller import (
    LatencyWindow,
    Observation,
    SloThresholds,
    snap_clock,
    snap_clock_down,
    snap_clock_up,
)

__all__ = [
    "FREESH_MIN_CLOCK_MHZ",
    "FREESH_TABLE7",
    "Aggregation",
    "MiadConfig",
    "MiadController",
    "is_congested",
]

Aggregation = Literal["max", "p99", "p90", "p50", "mean"]
"""How one period's samples of a metric are reduced before comparing with its threshold."""

FREESH_TABLE7: Final[Mapping[str, SloThresholds]] = {
    "SS": SloThresholds(ttft_s=0.300, tbt_s=0.150, e2e_s=7.0),
    "SL": SloThresholds(ttft_s=0.300, tbt_s=0.150, e2e_s=27.0),
    "LS": SloThresholds(ttft_s=0.600, tbt_s=0.150, e2e_s=10.0),
    "LL": SloThresholds(ttft_s=0.600, tbt_s=0.150, e2e_s=30.0),
}
"""FREESH Table 7: the congestion thresholds that trigger multiplicative increase."""

FREESH_MIN_CLOCK_MHZ: Final = 300.0
"""f_min: FREESH observed ≈300 MHz as the floor on A100."""

_PERCENTILE: Final = {"p99": 99.0, "p90": 90.0, "p50": 50.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class MiadConfig:
    """Parameters of MIAD (defaults: FREESH's chosen (2.0, 100 MHz) on an A100)."""

    increase_factor: float = 2.0
    """M of Eq. 5a."""
    decrease_mhz: float = 100.0
    """δ of Eq. 5b."""
    min_clock_mhz: float = FREESH_MIN_CLOCK_MHZ
    """f_min (:data:`FREESH_MIN_CLOCK_MHZ`)."""
    max_clock_mhz: float | None = None
    """f_max; ``None`` means the GPU's highest supported clock."""
    period_s: float = 1.0
    thresholds: Mapping[str, SloThresholds] = field(default_factory=lambda: dict(FREESH_TABLE7))
    """Per request type; types not listed use ``default_type``'s thresholds."""
    default_type: str = "SS"
    aggregation: Aggregation = "max"
    """Reduction of a period's samples per metric (unspecified in FREESH, see module doc)."""
    queue_triggers: bool = False
    """Also count a non-empty engine queue as congestion (FREESH: "or load is rising")."""
    hold_when_idle: bool = False
    """Keep the clock over a period with nothing running, waiting or measured: no latency
    is no evidence that a lower clock is safe, and Eq. 5b on an idle instance walks it to
    f_min, where the next burst's first prefills start."""

    def __post_init__(self) -> None:
        if self.increase_factor <= 1.0:
            raise ValueError("increase_factor must be > 1")
        if self.decrease_mhz <= 0.0 or self.period_s <= 0.0 or self.min_clock_mhz <= 0.0:
            raise ValueError("decrease_mhz, period_s and min_clock_mhz must be > 0")
        if self.default_type not in self.thresholds:
            raise ValueError(f"default_type {self.default_type!r} has no thresholds")


def _reduce(samples: tuple[float, ...], aggregation: Aggregation) -> float:
    if aggregation == "max":
        return max(samples)
    if aggregation == "mean":
        return float(np.mean(samples))
    return float(np.percentile(samples, _PERCENTILE[aggregation]))


def _idle(observation: Observation) -> bool:
    """Nothing running, waiting or measured in the period: no evidence either way."""
    return (
        observation.num_running == 0
        and observation.num_waiting == 0
        and not any(w.ttft_s or w.tbt_s or w.e2e_s for w in observation.latencies.values())
    )


def is_congested(
    latencies: Mapping[str, LatencyWindow],
    thresholds: Mapping[str, SloThresholds],
    *,
    aggregation: Aggregation = "max",
    default_type: str = "SS",
) -> bool:
    """Return whether any request type's reduced TTFT, TBT or E2E exceeds its threshold.

    Args:
        latencies: one period's samples by request type.
        thresholds: limits by request type (FREESH Table 7).
        aggregation: how samples of one metric are reduced.
        default_type: whose thresholds apply to a type missing from ``thresholds``.
    """
    for request_type, window in latencies.items():
        limit = thresholds.get(request_type, thresholds[default_type])
        for samples, bound in (
            (window.ttft_s, limit.ttft_s),
            (window.tbt_s, limit.tbt_s),
            (window.e2e_s, limit.e2e_s),
        ):
            if samples and _reduce(samples, aggregation) > bound:
                return True
    return False


class MiadController:
    """FREESH Eq. 5a/5b on one instance; see the module docstring."""

    def __init__(self, config: MiadConfig | None = None) -> None:
        """Start with no target; the first decision begins from the observed clock."""
        self._config = config or MiadConfig()
        self._target_mhz: float | None = None
        self._applied_mhz: float | None = None
        """The clock the last decision returned (what the target stands for on the grid)."""

    @property
    def config(self) -> MiadConfig:
        """The controller's parameters."""
        return self._config

    @property
    def period_s(self) -> float:
        """The control period (FREESH: 1 s)."""
        return self._config.period_s

    def decide(self, observation: Observation) -> float:
        """Apply Eq. 5a on congestion, Eq. 5b otherwise; return the snapped clock."""
        cfg = self._config
        clocks = observation.supported_clocks_mhz
        f_max = min(cfg.max_clock_mhz or observation.max_clock_mhz, observation.max_clock_mhz)
        f_min = min(max(cfg.min_clock_mhz, clocks[0]), f_max)
        target = self._target_mhz
        # Someone else moved the clock (planner, emergency ladder): continue from there. The
        # comparison is with the clock applied last, not snap(target): where f_max or f_min
        # lies off the grid the applied clock is snap_clock_down(f_max) / snap_clock_up(f_min),
        # which may differ from snap(target) without anyone having moved the clock.
        if (
            target is None
            or self._applied_mhz is None
            or abs(self._applied_mhz - observation.clock_mhz) > 1.0
        ):
            target = observation.clock_mhz
        congested = is_congested(
            observation.latencies,
            cfg.thresholds,
            aggregation=cfg.aggregation,
            default_type=cfg.default_type,
        ) or (cfg.queue_triggers and observation.num_waiting > 0)
        if congested:
            target = min(target * cfg.increase_factor, f_max)
        elif cfg.hold_when_idle and _idle(observation):
            target = min(max(target, f_min), f_max)
        else:
            target = max(target - cfg.decrease_mhz, f_min)
        self._target_mhz = target
        applied = snap_clock(target, clocks)
        # Never leave [f_min, f_max] by rounding to the GPU's grid.
        if applied > f_max:
            applied = snap_clock_down(f_max, clocks)
        elif applied < f_min:
            applied = snap_clock_up(f_min, clocks)
        self._applied_mhz = applied
        return applied
