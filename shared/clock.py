"""Model time for a sped-up stack.

Simulated workers and the load generator share a speed-up factor K (as NVIDIA Dynamo's
mocker does): one wall second is K model seconds. Laxities, deadlines, control periods and
carbon lookups run in model time; sleeps and timeouts run in wall time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from shared.config import ClockSettings

__all__ = ["ModelClock"]


@dataclass(frozen=True, slots=True)
class ModelClock:
    """Maps wall time to model time with a fixed speed-up."""

    speedup: float = 1.0
    origin_wall_s: float = field(default_factory=time.time)
    origin_model_s: float = 0.0

    @classmethod
    def from_settings(cls, settings: ClockSettings) -> ModelClock:
        """Build the clock every process of one stack agrees on."""
        origin = settings.origin_wall_s if settings.origin_wall_s is not None else time.time()
        return cls(settings.speedup, origin, settings.origin_model_s)

    def model_at(self, wall_s: float) -> float:
        """Model time at a given wall time."""
        return self.origin_model_s + (wall_s - self.origin_wall_s) * self.speedup

    def now(self) -> float:
        """Model time now."""
        return self.model_at(time.time())

    def wall_period(self, model_s: float) -> float:
        """Wall seconds that correspond to a model-time period."""
        return model_s / self.speedup
