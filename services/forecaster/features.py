"""The hourly grid every model reads, and the feature matrix of the gradient-boosted model.

:func:`to_grid` turns a :class:`~services.forecaster.sources.CarbonHistory` into gap-free
arrays, filling gaps *causally* (forward fill), so a filled input never carries a later
value back in time. :func:`gbm_features` builds, for many origins at once, one row per
(origin, horizon) with calendar, lag, level and fuel-share features, all read from
``y[:o]`` (see :mod:`services.forecaster.baselines` for the index conventions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from services.forecaster.baselines import DAY, TEMPLATE_DAYS
from services.forecaster.holidays import holiday_hours
from services.forecaster.sources import CarbonHistory
from services.forecaster.sun import clear_sky_hours

__all__ = ["FLOOR_G", "HORIZON_COLUMN", "HourlyGrid", "gbm_features", "log_ratio", "to_grid"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

FLOOR_G: Final = 1.0
"""Intensity floor (gCO2/kWh) before taking logs: some zones (CA-ON) touch zero."""
HORIZON_COLUMN: Final = 0
"""Column of :func:`gbm_features`' matrix holding the horizon (hours); the booster routes
rows to its per-bucket models by it."""


@dataclass(frozen=True, slots=True)
class HourlyGrid:
    """A region's history on a gap-free hourly UTC grid."""

    start: pd.Timestamp
    """Timestamp of index 0."""
    y: FloatArray
    """Intensity, gaps forward-filled."""
    observed: BoolArray
    """True where ``y`` is a real observation (False where it was filled)."""
    shares: FloatArray
    """``(T, S)`` fuel or low-carbon shares, forward-filled; ``S`` may be 0."""
    share_names: tuple[str, ...]
    """Column names of ``shares``."""
    generation: FloatArray
    """``(T, G)`` generation in MW per fuel, forward-filled; ``G`` is 0 where the source
    gives shares only."""
    generation_names: tuple[str, ...]
    """Column names of ``generation``."""
    context: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    """``(T, C)`` other regions' intensity, forward-filled (a region never seen stays
    NaN); ``C`` is 0 without a context."""
    context_names: tuple[str, ...] = ()
    """Column names (regions) of ``context``."""
    region: str = ""
    """The history's region, for its local holiday calendar."""
    holiday_tz: str | None = None
    """The calendar's local time zone (the zone's settings); ``""``: no holidays; ``None``:
    the region's default."""

    def __len__(self) -> int:
        return len(self.y)

    def index_of(self, stamp: pd.Timestamp) -> int:
        """Return the grid index of an hourly timestamp (may lie past the end)."""
        return int((stamp - self.start) // pd.Timedelta(hours=1))

    def times(self) -> pd.DatetimeIndex:
        """Return the grid's timestamps."""
        return pd.date_range(self.start, periods=len(self.y), freq="h")


def _hourly_columns(
    frame: pd.DataFrame | None, grid: pd.DatetimeIndex
) -> tuple[FloatArray, tuple[str, ...]]:
    """Hourly means of ``frame``'s columns on ``grid``, gaps filled causally, and their names
    (an empty array and no names without a frame)."""
    if frame is None or not len(frame.columns):
        return np.zeros((len(grid), 0)), ()
    hourly = frame.resample("h").mean().reindex(grid)
    return _causal_fill(hourly.to_numpy(dtype=np.float64)), tuple(str(c) for c in hourly.columns)


def _causal_fill(values: FloatArray) -> FloatArray:
    """Forward-fill NaNs along axis 0; a leading gap takes the first valid value."""
    frame = pd.DataFrame(values).ffill().bfill()
    return frame.to_numpy(dtype=np.float64)


def to_grid(history: CarbonHistory) -> HourlyGrid:
    """Put a history on a gap-free hourly grid, filling gaps causally.

    Raises:
        ValueError: when the history has no observation at all.
    """
    series = history.intensity.sort_index()
    if series.notna().sum() == 0:
        raise ValueError(f"history of {history.region} has no observation")
    series = series[~series.index.duplicated(keep="last")]
    grid = pd.date_range(series.index[0].floor("h"), series.index[-1].floor("h"), freq="h")
    hourly = series.resample("h").mean().reindex(grid)
    raw = hourly.to_numpy(dtype=np.float64)
    shares, names = _hourly_columns(history.fuel_mix, grid)
    generation, generation_names = _hourly_columns(history.generation, grid)
    context, context_names = _hourly_columns(history.context, grid)
    return HourlyGrid(
        start=grid[0],
        y=_causal_fill(raw[:, None])[:, 0],
        observed=~np.isnan(raw),
        shares=shares,
        share_names=names,
        generation=generation,
        generation_names=generation_names,
        context=context,
        context_names=context_names,
        region=history.region,
        holiday_tz=history.holiday_tz,
    )


def log_ratio(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    """Return ``log(max(a, floor) / max(b, floor))``, the scale-free error the GBM learns."""
    return np.log(np.maximum(numerator, FLOOR_G)) - np.log(np.maximum(denominator, FLOOR_G))


def _calendar(grid: HourlyGrid, targets: IntArray) -> list[FloatArray]:
    hours = targets.astype(np.float64) + grid.start.hour
    hour_of_day = np.mod(hours, DAY)
    day_number = np.floor(hours / DAY) + grid.start.day_of_week
    return [hour_of_day, np.mod(day_number, 7.0)]


def gbm_features(
    grid: HourlyGrid,
    origins: IntArray,
    horizon_h: int,
    template: FloatArray,
    candidates: dict[str, FloatArray],
    context: bool = False,
    holidays: bool = False,
    solar: bool = False,
) -> tuple[FloatArray, list[str]]:
    """Build the GBM design matrix: one row per (origin, horizon), origin-major.

    Args:
        grid: the region's hourly grid.
        origins: origin indices (first forecast hour); only ``y[:o]`` is read.
        horizon_h: hours forecast per origin.
        template: ``(n, H)`` 7-day template, the ratio's denominator.
        candidates: ``(n, H)`` forecasts of the reference models (seasonal naive, template +
            level, Holt-Winters), fed as log-ratios to the template.
        context: add the level ratios of every context region (:attr:`HourlyGrid.context`,
            read up to ``o - 1`` like ``y``): the last hour against its 7-day same-hour
            mean, the last day against the last week and the last 3 h against the last day.
        holidays: add the region's holiday calendar (:mod:`services.forecaster.holidays`):
            whether the target hour is a holiday, how many of the seven hours the template
            averages for it are, and whether the same-hour-yesterday hour is.
        solar: add the sun's path (:mod:`services.forecaster.sun`): the target hour's
            clear-sky proxy minus its mean over the template's seven hours and minus its
            value at the same-hour-yesterday hour.

    Returns:
        The ``(n * H, F)`` matrix and its column names; column :data:`HORIZON_COLUMN` is
        the horizon in hours.
    """
    y, n = grid.y, len(origins)
    steps = np.arange(1, horizon_h + 1, dtype=np.int64)
    targets = origins[:, None] + steps[None, :] - 1
    columns: dict[str, FloatArray] = {"horizon_h": np.broadcast_to(steps, (n, horizon_h))}
    for name, values in zip(("hour_utc", "weekday"), _calendar(grid, targets), strict=True):
        columns[name] = values
    for name, forecast in candidates.items():
        columns[f"lr_{name}"] = log_ratio(forecast, template)
    # The hour same-hour-yesterday reads: the target's hour on the latest day before the origin.
    same_hour = targets - DAY * (-(-steps // DAY))[None, :]
    # ... and the seven hours the template averages for it (holiday and sun features).
    if holidays or solar:
        template_hours = same_hour[:, :, None] - DAY * np.arange(TEMPLATE_DAYS)[None, None, :]
    if holidays:
        columns.update(_holiday_columns(grid, targets, same_hour, template_hours))
    if solar:
        columns.update(_solar_columns(grid, targets, same_hour, template_hours))

    last_vs_template, day_vs_week, three_h_vs_day = _level_ratios(y, origins)
    last_day = y[origins[:, None] - np.arange(1, DAY + 1)[None, :]]
    per_origin: dict[str, FloatArray] = {
        "lr_last_vs_template": last_vs_template,
        "lr_last_vs_day_ago": log_ratio(y[origins - 1], y[origins - 1 - DAY]),
        "lr_day_vs_week": day_vs_week,
        "lr_3h_vs_day": three_h_vs_day,
        "day_volatility": np.std(np.diff(np.log(np.maximum(last_day, 1.0))), axis=1),
    }
    for j, share in enumerate(grid.share_names):
        columns[f"share_{share}_same_hour"] = grid.shares[same_hour, j]
        now = grid.shares[origins - 1, j]
        week = grid.shares[origins[:, None] - np.arange(1, TEMPLATE_DAYS * DAY + 1)[None, :], j]
        per_origin[f"share_{share}"] = now
        per_origin[f"share_{share}_vs_week"] = now - week.mean(axis=1)
    if context:
        per_origin.update(_context_levels(grid, origins))
    for name, values in per_origin.items():
        columns[name] = np.broadcast_to(values[:, None], (n, horizon_h))
    names = list(columns)
    matrix = np.stack([np.asarray(columns[c], dtype=np.float64).ravel() for c in names], axis=1)
    return matrix, names


def _holiday_columns(
    grid: HourlyGrid, targets: IntArray, yesterday: IntArray, template_hours: IntArray
) -> dict[str, FloatArray]:
    """The target hour's holiday flag and those of the hours its baselines read.

    Same-hour-yesterday reads ``yesterday`` = ``t - 24 k`` and the template averages
    ``y[t - 24 (k + j)]``, j = 0..6, with ``k = ceil(h / 24)``
    (:mod:`services.forecaster.baselines`). Targets may lie past the grid's end (a live
    forecast): the calendar covers them.
    """
    flags = holiday_hours(grid.region, grid.start, int(targets.max()) + 1, grid.holiday_tz).astype(
        np.float64
    )
    return {
        "holiday_target": flags[targets],
        "holiday_in_template": flags[template_hours].sum(axis=2),
        "holiday_same_hour_yesterday": flags[yesterday],
    }


def _solar_columns(
    grid: HourlyGrid, targets: IntArray, yesterday: IntArray, template_hours: IntArray
) -> dict[str, FloatArray]:
    """How far the sun at the target hour is from the sun of the hours the baselines read.

    Differences only (docs/forecaster.md, *The sun's path*): the clear-sky level itself would
    tell the booster the date, as the removed day-of-year features did. The hours read are
    those of :func:`_holiday_columns`; targets past the grid's end are covered.
    """
    sun = clear_sky_hours(grid.region, grid.start, int(targets.max()) + 1)
    return {
        "sun_vs_template": sun[targets] - sun[template_hours].mean(axis=2),
        "sun_vs_same_hour": sun[targets] - sun[yesterday],
    }


def _level_ratios(
    values: FloatArray, origins: IntArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """A series' level at each origin, from its hours before the origin: the last hour
    against its 7-day same-hour mean, the last day against the last week, and the last 3 h
    against the last day (log-ratios)."""
    last = values[origins - 1]
    same_hour = values[(origins - 1)[:, None] - DAY * np.arange(1, TEMPLATE_DAYS + 1)[None, :]]
    recent = values[origins[:, None] - np.arange(1, TEMPLATE_DAYS * DAY + 1)[None, :]]
    day = recent[:, :DAY].mean(axis=1)
    return (
        log_ratio(last, same_hour.mean(axis=1)),
        log_ratio(day, recent.mean(axis=1)),
        log_ratio(recent[:, :3].mean(axis=1), day),
    )


def _context_levels(grid: HourlyGrid, origins: IntArray) -> dict[str, FloatArray]:
    """:func:`_level_ratios` of each context region, the region's own level features.

    The other regions' recent changes carry what the region's own past does not: a weather
    system or a hydro or import swing seen next door first. A region missing at an origin
    (not in the source, or not yet begun) gives NaN, which the booster treats as missing.
    """
    out: dict[str, FloatArray] = {}
    for j, name in enumerate(grid.context_names):
        with np.errstate(invalid="ignore"):
            ratios = _level_ratios(grid.context[:, j], origins)
        for kind, values in zip(
            ("last_vs_template", "day_vs_week", "3h_vs_day"), ratios, strict=True
        ):
            out[f"ctx_{name}_{kind}"] = values
    return out
