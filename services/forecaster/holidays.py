"""Public holidays on a region's hourly UTC grid, for the booster's calendar features.

A holiday looks like a Sunday to the grid: demand drops, the marginal fossil share and the
intensity with it, and for the next week the 7-day template averages that day into every
forecast of the same hour. The calendar is known years ahead, so reading it for future
hours is no look-ahead.

The holidays are NERC's six off-peak holidays, the list North American power markets use
for their peak/off-peak calendars: New Year's Day, Memorial Day, Independence Day, Labor Day,
Thanksgiving Day and Christmas Day, a Sunday holiday moving to the Monday. Only US regions
have them here; elsewhere no hour is a holiday (other countries' calendars are not modelled).
"""

from __future__ import annotations

import datetime as dt
from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from shared.zones import DEFAULT_TIMEZONES

__all__ = ["US_REGION_TIMEZONES", "holiday_hours", "nerc_holidays"]

BoolArray = npt.NDArray[np.bool_]

US_REGION_TIMEZONES: Final[dict[str, str]] = DEFAULT_TIMEZONES
"""Local time zone of the US regions known without zone settings (:mod:`shared.zones`)."""


def _weekday_of_month(year: int, month: int, weekday: int, nth: int) -> dt.date:
    """The ``nth`` (1-based; -1: last) ``weekday`` (Monday 0) of a month."""
    if nth > 0:
        first = dt.date(year, month, 1)
        return first + dt.timedelta(days=(weekday - first.weekday()) % 7 + 7 * (nth - 1))
    following = dt.date(year + month // 12, month % 12 + 1, 1)
    last = following - dt.timedelta(days=1)
    return last - dt.timedelta(days=(last.weekday() - weekday) % 7)


def _observed(day: dt.date) -> dt.date:
    """NERC: a holiday on a Sunday is observed on the Monday; on a Saturday, not moved."""
    return day + dt.timedelta(days=1) if day.weekday() == 6 else day


def nerc_holidays(year: int) -> list[dt.date]:
    """NERC's six off-peak holidays of ``year``, as observed."""
    return [
        _observed(dt.date(year, 1, 1)),
        _weekday_of_month(year, 5, 0, -1),  # Memorial Day: last Monday of May
        _observed(dt.date(year, 7, 4)),
        _weekday_of_month(year, 9, 0, 1),  # Labor Day: first Monday of September
        _weekday_of_month(year, 11, 3, 4),  # Thanksgiving: fourth Thursday of November
        _observed(dt.date(year, 12, 25)),
    ]


def holiday_hours(
    region: str, start: pd.Timestamp, hours: int, timezone: str | None = None
) -> BoolArray:
    """Whether each of ``hours`` UTC hours from ``start`` falls on a local holiday.

    ``timezone`` is the calendar's local zone (a zone's settings, :mod:`shared.zones`);
    without it (``None``) the region's default (:data:`US_REGION_TIMEZONES`). All False for
    ``""`` (a zone without holidays) and for a region with neither (no calendar).
    """
    zone = timezone if timezone is not None else US_REGION_TIMEZONES.get(region)
    if not zone or hours <= 0:
        return np.zeros(max(hours, 0), dtype=np.bool_)
    stamps = pd.date_range(pd.Timestamp(start).tz_convert("UTC"), periods=hours, freq="h")
    local = stamps.tz_convert(zone).tz_localize(None).normalize()
    days = local.to_numpy().astype("datetime64[D]")
    years = range(int(local[0].year), int(local[-1].year) + 1)
    holidays = np.array([d for y in years for d in nerc_holidays(y)], dtype="datetime64[D]")
    flags: BoolArray = np.isin(days, holidays)
    return flags
