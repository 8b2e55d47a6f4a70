"""Hourly carbon intensity per region on the simulator's clock, and its simple forecast.

Intensity comes from each region's grid zone (``eia:<BA>``, ``em:<ZONE>`` or a bare code one
source has a file for; :mod:`shared.zones`, settings from the settings file's
``forecaster.zones``) through :func:`zone_history` (gCO2/kWh, hourly). Simulated second
``t`` falls in the hour of ``start_utc + t``. The forecast the carbon-aware policies see is
persistence (the last complete hour), the weakest honest forecaster: it never looks into
the future.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from numpy.typing import NDArray

if TYPE_CHECKING:
    from services.forecaster.sources import CarbonHistory
    from shared.zones import ZoneRegistry

__all__ = ["CarbonClock", "check_zones", "zone_history", "zone_source"]

_HOUR_S = 3600.0


@functools.cache
def _registry() -> ZoneRegistry:
    from shared.config import load_settings
    from shared.zones import ZoneRegistry

    return ZoneRegistry.from_settings(load_settings().forecaster.zones)


def check_zones(names: Sequence[str]) -> None:
    """Refuse a zone without data or settings before a simulation starts.

    Raises:
        ValueError: naming the zone and what is missing for it.
    """
    for name in names:
        _registry().resolve(name)


def zone_source(name: str) -> str:
    """The source (``eia``, ``em``) of grid zone ``name``, for its forecaster settings."""
    return _registry().resolve(name).source


@functools.cache
def zone_history(name: str) -> CarbonHistory:
    """The hourly history of grid zone ``name`` (read once per process)."""
    from services.forecaster.sources import load_zone

    return load_zone(_registry().resolve(name))


class CarbonClock:
    """Intensity lookups for a set of regions over a window of hours."""

    def __init__(self, hourly: dict[str, NDArray[np.float64]], start_offset_s: float) -> None:
        """Build from per-region hourly arrays whose index 0 is the hour containing ``t = 0``.

        Args:
            hourly: gCO2/kWh per hour, per region name.
            start_offset_s: seconds from the start of hour 0 to simulated ``t = 0``.
        """
        self._hourly = hourly
        self._offset = start_offset_s

    @classmethod
    def from_eia(
        cls, regions: Sequence[tuple[str, str]], start_utc: datetime, span_s: float
    ) -> CarbonClock:
        """Load ``(region name, grid zone)`` pairs for ``span_s`` seconds from ``start_utc``.

        Gaps in the data are filled from the neighbouring hours.

        Raises:
            ValueError: when the data does not cover the window.
        """
        first = pd.Timestamp(start_utc).floor("h")
        hours = math.ceil((pd.Timestamp(start_utc) - first).total_seconds() + span_s) // 3600 + 2
        index = pd.date_range(first - pd.Timedelta(hours=1), periods=int(hours) + 1, freq="h")
        hourly: dict[str, NDArray[np.float64]] = {}
        for name, code in regions:
            series = zone_history(code).intensity.reindex(index).ffill().bfill()
            if series.isna().any():
                raise ValueError(f"carbon data for {code} does not cover {index[0]}..{index[-1]}")
            hourly[name] = series.to_numpy(dtype=np.float64)
        # Index 0 is the hour *before* the start, so the persistence forecast has a value.
        offset = (pd.Timestamp(start_utc) - first).total_seconds() + _HOUR_S
        return cls(hourly, offset)

    def _hour(self, t_s: float) -> int:
        return int((self._offset + t_s) // _HOUR_S)

    def intensity(self, region: str, t_s: float) -> float:
        """Measured intensity (gCO2/kWh) of ``region`` at simulated time ``t_s``."""
        series = self._hourly[region]
        return float(series[min(self._hour(t_s), len(series) - 1)])

    def forecast(self, region: str, t_s: float) -> float:
        """Persistence forecast for the hour containing ``t_s``: the previous hour's value."""
        series = self._hourly[region]
        return float(series[max(0, min(self._hour(t_s) - 1, len(series) - 1))])
