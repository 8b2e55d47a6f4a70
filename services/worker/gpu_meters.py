"""The GPU series a worker exports on ``/metrics``: base units, counters, any speed-up.

Energy and CO2 only grow, so they are counters (``greenserve_gpu_energy_joules_total``,
``greenserve_gpu_co2_grams_total``) advanced by what the engine reported since the last
export, not gauges set to a running total. The clock is in hertz, Prometheus's base unit.

Energy and CO2 accrue in model time: at a speed-up K the simulated GPU lives K model
seconds per wall second, so ``rate()`` of its energy (per wall second) reads K times its
power (1,260 W for an A100 idling at 63 W at K = 20). ``greenserve_gpu_model_seconds_total``
counts the model seconds those counters cover, and
``rate(energy) / rate(model_seconds)`` is the GPU's mean power at any speed-up (at K = 1,
a real GPU, the ratio is the ordinary one).

The series live here rather than in ``shared.counters`` because only a worker has a GPU:
every process registers what ``shared.counters`` defines and lists it on its ``/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from prometheus_client import Counter, Gauge

__all__ = [
    "GPU_CLOCK_HZ",
    "GPU_CO2_G",
    "GPU_ENERGY_J",
    "GPU_MODEL_S",
    "GPU_POWER_W",
    "GpuMeters",
    "increment",
]

GPU_CLOCK_HZ: Final = Gauge("greenserve_gpu_clock_hertz", "SM clock per instance", ["worker"])
GPU_POWER_W: Final = Gauge(
    "greenserve_gpu_power_watts", "Power per instance, in model time", ["worker"]
)
GPU_ENERGY_J: Final = Counter(
    "greenserve_gpu_energy_joules",
    "Energy per instance in model time (like NVML's counter); divide its rate by "
    "greenserve_gpu_model_seconds_total's for power at any speed-up",
    ["worker"],
)
GPU_CO2_G: Final = Counter(
    "greenserve_gpu_co2_grams",
    "CO2 per instance: each energy increment times its region's carbon intensity for that "
    "hour (the forecaster's current-hour value, from Redis)",
    ["worker", "region"],
)
GPU_MODEL_S: Final = Counter(
    "greenserve_gpu_model_seconds",
    "Model seconds the energy and CO2 counters cover (wall seconds times the speed-up)",
    ["worker"],
)
_HZ_PER_MHZ: Final = 1e6


def increment(previous: float, now: float) -> float:
    """What a running total gained since ``previous``; 0 when it went back (a restarted
    engine's counter starts again), so a counter never runs backwards."""
    return max(0.0, now - previous)


@dataclass(slots=True)
class GpuMeters:
    """One worker's GPU series and the totals they were last advanced to."""

    worker_id: str
    region: str
    model_s: float
    """Model time of the last export (at first, when the engine started counting)."""
    energy_j: float = 0.0
    co2_g: float = 0.0
    _labels: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self._labels = (self.worker_id, self.region)

    def export(
        self, *, clock_mhz: float, power_w: float, energy_j: float, co2_g: float, model_s: float
    ) -> None:
        """Set the clock and power gauges and advance the counters to these totals.

        Args:
            clock_mhz: the SM clock now.
            power_w: the power now (model time).
            energy_j: the engine's energy counter (joules since it started).
            co2_g: the CO2 of that energy so far (grams).
            model_s: model time now (seconds).
        """
        GPU_CLOCK_HZ.labels(self.worker_id).set(clock_mhz * _HZ_PER_MHZ)
        GPU_POWER_W.labels(self.worker_id).set(power_w)
        GPU_ENERGY_J.labels(self.worker_id).inc(increment(self.energy_j, energy_j))
        GPU_CO2_G.labels(*self._labels).inc(increment(self.co2_g, co2_g))
        GPU_MODEL_S.labels(self.worker_id).inc(increment(self.model_s, model_s))
        self.energy_j, self.co2_g, self.model_s = energy_j, co2_g, model_s
