"""Where the sun stands over a region, hour by hour, for the booster's solar features.

The 7-day template reads the sun of three to four days before its target; in spring and
autumn the days' length changes by up to 2–3 minutes a day at these latitudes, so at dawn,
dusk and noon the template expects solar output of a sun that has moved on (tenth issue-6
round, docs/forecaster.md). The sun's position is geometry, known for any future hour, so
reading it for a forecast's target is no look-ahead.

The position is NOAA's low-precision solar geometry (Spencer's Fourier series for the
declination and the equation of time; error ≲ 0.5°, far below what one point per region
costs). Each region is one fixed point, the approximate centre of its load and solar
fleet, chosen from a map (not fitted).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["REGION_POINTS", "clear_sky_hours", "sin_elevation"]

FloatArray = npt.NDArray[np.float64]

REGION_POINTS: Final[dict[str, tuple[float, float]]] = {
    # EIA-930 balancing authorities of the shared data: (latitude, longitude east), degrees
    "AZPS": (33.45, -112.07),  # Phoenix
    "BPAT": (45.6, -121.0),  # Columbia River basin
    "CISO": (
        35.4,
        -119.0,
    ),  # southern Central Valley, between the Bay Area, LA and the desert solar
    "MISO": (40.5, -90.5),  # Louisiana to Minnesota: central Illinois
    "NYIS": (42.0, -75.0),
    "PJM": (39.8, -79.5),  # Chicago to New Jersey: western Pennsylvania
    "WAAT": (47.5, -120.5),  # Pacific Northwest (its intensity follows BPAT's)
    # Electricity Maps zones
    "US-CAL-CISO": (35.4, -119.0),
    "US-MIDA-PJM": (39.8, -79.5),
    "US-NY-NYIS": (42.0, -75.0),
    "CA-ON": (44.0, -79.5),
    "DE-LU": (51.0, 10.0),
    "GB": (52.5, -1.5),
    "JP-TK": (35.7, 139.7),
}
"""One point per region; a region not listed gets no sun (zeros)."""


def sin_elevation(times_utc: pd.DatetimeIndex, latitude: float, longitude: float) -> FloatArray:
    """Sine of the sun's elevation at each UTC instant (negative below the horizon).

    NOAA's general solar position calculations: fractional year γ, declination δ and
    equation of time from Spencer's series, hour angle from true solar time, then
    sin(elevation) = sin φ sin δ + cos φ cos δ cos(hour angle).
    """
    day = times_utc.day_of_year.to_numpy(dtype=np.float64)
    hour = (
        times_utc.hour.to_numpy(dtype=np.float64)
        + times_utc.minute.to_numpy(dtype=np.float64) / 60.0
        + times_utc.second.to_numpy(dtype=np.float64) / 3600.0
    )
    days_in_year = np.where(times_utc.is_leap_year, 366.0, 365.0)
    gamma = 2.0 * np.pi / days_in_year * (day - 1.0 + (hour - 12.0) / 24.0)
    eq_time_min = 229.18 * (
        0.000075
        + 0.001868 * np.cos(gamma)
        - 0.032077 * np.sin(gamma)
        - 0.014615 * np.cos(2 * gamma)
        - 0.040849 * np.sin(2 * gamma)
    )
    declination = (
        0.006918
        - 0.399912 * np.cos(gamma)
        + 0.070257 * np.sin(gamma)
        - 0.006758 * np.cos(2 * gamma)
        + 0.000907 * np.sin(2 * gamma)
        - 0.002697 * np.cos(3 * gamma)
        + 0.00148 * np.sin(3 * gamma)
    )
    solar_time_min = hour * 60.0 + eq_time_min + 4.0 * longitude
    hour_angle = np.radians(solar_time_min / 4.0 - 180.0)
    phi = np.radians(latitude)
    result: FloatArray = np.sin(phi) * np.sin(declination) + np.cos(phi) * np.cos(
        declination
    ) * np.cos(hour_angle)
    return result


def clear_sky_hours(region: str, start: pd.Timestamp, hours: int) -> FloatArray:
    """max(0, sin(elevation)) at the midpoint of each of ``hours`` UTC hours from ``start``.

    A clear-sky proxy: irradiance on a horizontal surface scales with it. Zeros for a
    region without a point in :data:`REGION_POINTS`.
    """
    point = REGION_POINTS.get(region)
    if point is None:
        return np.zeros(hours)
    first = pd.Timestamp(start)
    first = first.tz_localize("UTC") if first.tzinfo is None else first.tz_convert("UTC")
    midpoints = pd.date_range(first + pd.Timedelta(minutes=30), periods=hours, freq="h")
    out: FloatArray = np.maximum(sin_elevation(midpoints, *point), 0.0)
    return out
