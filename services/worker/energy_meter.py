"""Energy, power and clock of an engine the worker does not simulate itself (``vllm`` backend).

Sources, best first: NVML on the worker's GPU host (opt-in; exact counter read at every
token batch), the ``greenserve:*`` series a ``greenserve sim-engine`` publishes (scraped
each stats period and extrapolated between scrapes at the last measured rate), or nothing
(zero). Counters start at 0 when the meter is created, like the ``sim`` backend's engine.
Per-request energy is the meter's increase since the previous token batch, split over the
batch's tokens by the shim; attributed energy never runs ahead of the meter.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from services.worker.vllm_metrics import EngineMetrics
from shared.gpu import NvmlReader

__all__ = ["EnergyMeter"]


class EnergyMeter:
    """Tracks the instance's energy counter and hands out increments for attribution."""

    def __init__(
        self,
        nvml: NvmlReader | None = None,
        *,
        rate_window_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Meter from ``nvml`` when given, else from scraped sim-engine metrics, else zero.

        Args:
            nvml: an open NVML reader of the instance's GPUs (it is closed with the meter).
            rate_window_s: wall span over which scraped energy is differentiated into the
                rate used between scrapes; shorter spans make one long iteration look like
                a power spike, since the engine adds each iteration's energy at once.
            clock: wall seconds.
        """
        self._nvml = nvml
        self._clock = clock
        self._rate_window_s = rate_window_s
        self._baseline = nvml.energy_j() if nvml is not None else None
        self._attributed = 0.0
        # Scrapes as (wall s, energy J since the first scrape, model s or None), oldest first.
        self._scrapes: deque[tuple[float, float, float | None]] = deque()
        self._scraped_baseline: float | None = None
        self._rate_j_per_wall_s = 0.0
        self._power_w = 0.0
        self._clock_mhz = 0.0

    @property
    def source(self) -> str:
        """``nvml``, ``sim-engine`` or ``none``."""
        if self._nvml is not None:
            return "nvml"
        return "sim-engine" if self._scrapes else "none"

    def observe(self, metrics: EngineMetrics) -> None:
        """Take a scrape's energy counter, model time and clock (ignored when NVML meters)."""
        if self._nvml is not None:
            return
        if metrics.clock_mhz is not None:
            self._clock_mhz = metrics.clock_mhz
        if metrics.energy_j is None:
            return
        now = self._clock()
        if self._scraped_baseline is None:
            self._scraped_baseline = metrics.energy_j
        self._scrapes.append((now, metrics.energy_j - self._scraped_baseline, metrics.model_time_s))
        # Keep the newest scrape that is at least a window old as the reference point.
        while len(self._scrapes) > 2 and now - self._scrapes[1][0] >= self._rate_window_s:
            self._scrapes.popleft()
        t_ref, e_ref, m_ref = self._scrapes[0]
        delta_e = max(0.0, self._scrapes[-1][1] - e_ref)
        if now > t_ref:
            self._rate_j_per_wall_s = delta_e / (now - t_ref)
        model_now = metrics.model_time_s
        # Power in the engine's own time, as the sim backend reports it.
        if m_ref is not None and model_now is not None and model_now > m_ref:
            self._power_w = delta_e / (model_now - m_ref)
        elif now > t_ref:
            self._power_w = self._rate_j_per_wall_s

    def energy_j(self) -> float:
        """Best estimate of the counter now (joules since the meter started)."""
        if self._nvml is not None:
            return self._nvml.energy_j() - (self._baseline or 0.0)
        if not self._scrapes:
            return 0.0
        t_last, e_last, _ = self._scrapes[-1]
        # Extrapolate at most one window: a stalled scrape must not inflate the estimate.
        ahead = min(max(0.0, self._clock() - t_last), self._rate_window_s)
        return e_last + self._rate_j_per_wall_s * ahead

    def counter_j(self) -> float:
        """A monotone counter for stats: the last reading, never below what was attributed."""
        if self._nvml is not None:
            return self.energy_j()
        scraped = self._scrapes[-1][1] if self._scrapes else 0.0
        return max(scraped, self._attributed)

    def take(self) -> float:
        """Energy not yet attributed to any token (0 when the estimate ran ahead)."""
        now = self.energy_j()
        increment = max(0.0, now - self._attributed)
        self._attributed = max(self._attributed, now)
        return increment

    def power_w(self) -> float:
        """Current power (NVML) or average since the previous scrape (sim-engine)."""
        return self._nvml.power_w() if self._nvml is not None else self._power_w

    def clock_mhz(self) -> float:
        """SM clock (NVML or sim-engine); 0 when unknown."""
        return self._nvml.sm_clock_mhz() if self._nvml is not None else self._clock_mhz

    def close(self) -> None:
        """Close the NVML reader, if any."""
        if self._nvml is not None:
            self._nvml.close()
