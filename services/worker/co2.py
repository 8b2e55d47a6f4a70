"""A worker's CO2: its energy priced at its region's intensity, from the carbon forecast.

The forecaster stores each region's latest :class:`~proto.messages.Forecast` in Redis; the
worker reads its own region's, takes the value of the current model hour and adds each
energy increment times that intensity (:class:`~shared.metrics.energy.CarbonMeter`). The
result is the ``greenserve_gpu_co2_grams_total`` metric only, so nothing here may stop the
heartbeat that reports it: a forecast that cannot be read or decoded counts no CO2 until
the next good read, with one warning per outage.
"""

from __future__ import annotations

import logging
import time

from redis.exceptions import RedisError

from proto.codec import DecodeError, decode
from proto.messages import Forecast
from shared.lifecycle import ServiceContext
from shared.metrics.energy import CarbonMeter
from shared.store import as_bytes

__all__ = ["FORECAST_READ_WALL_S", "RegionCarbon"]

FORECAST_READ_WALL_S = 10.0
"""How often (wall s) a worker re-reads its region's carbon forecast for the CO2 metric."""

logger = logging.getLogger(__name__)


class RegionCarbon:
    """The CO2 of one worker's energy at its region's current forecast intensity."""

    def __init__(self, ctx: ServiceContext, region: str) -> None:
        self._ctx = ctx
        self._region = region
        self._meter = CarbonMeter()
        self._forecast: Forecast | None = None
        self._read_at = 0.0
        self._failed = False
        self.last_intensity: float | None = None
        """The intensity :meth:`intensity_now` last returned (g/kWh), for pricing each
        finished request without a Redis read on the token path."""

    async def grams(self, energy_j: float) -> float:
        """Grams of CO2 so far, given the energy counter's current value (joules)."""
        return self._meter.add(energy_j, await self.intensity_now())

    async def intensity_now(self) -> float | None:
        """The region's carbon intensity for the current model hour (``None`` before the
        first forecast or while the last read failed).

        The forecast is read again every :data:`FORECAST_READ_WALL_S` only: it changes once
        per ``forecaster.refresh_s``, and a fleet's workers need not each read it twice a
        second."""
        now = time.monotonic()
        waiting = self._forecast is None and not self._failed  # none published yet
        if waiting or now - self._read_at >= FORECAST_READ_WALL_S:
            self._read_at = now
            try:
                raw = await self._ctx.redis.get(self._ctx.keys.forecast(self._region))
                self._forecast = None if raw is None else decode(as_bytes(raw), Forecast)
            except (RedisError, DecodeError) as exc:
                if not self._failed:
                    logger.warning("cannot read the %s forecast: %s", self._region, exc)
                self._failed, self._forecast = True, None
            else:
                self._failed = False
        value = None if self._forecast is None else self._forecast.value_at(self._ctx.clock.now())
        self.last_intensity = value
        return value
