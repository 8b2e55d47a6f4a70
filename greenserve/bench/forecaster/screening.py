"""Reporting errors in EIA-930 histories: hours whose total generation cannot be real.

EIA-930 carries hours a balancing authority misreported: PJM on 2022-10-01 05:00-08:00 UTC
reports 21 MW of gas and no coal or nuclear, ≈ 270 MW for a system that runs at ≈ 90 GW,
and an intensity of 47 g/kWh for ≈ 300 (docs/forecaster.md, the screening rule). As inputs
such hours mislead every model; as actuals they charge every model ≈ 540 %. The rule reads
only the generation data, and only the hours before the one it judges, so a live forecaster
can apply it to the hour it has just received: total generation below ``low`` or above
``high`` times the median total of the ``window_h`` hours before it marks a reporting
error, and the hour becomes a gap (forward-filled as an input, not trained on, not scored).
"""

from __future__ import annotations

import dataclasses
from typing import Final

import numpy as np
import pandas as pd

from services.forecaster.sources import CarbonHistory

__all__ = ["HIGH", "LOW", "WINDOW_H", "implausible_hours", "screened"]

LOW: Final = 0.5
HIGH: Final = 2.0
WINDOW_H: Final = 48
MIN_HOURS: Final = 12
"""Hours of the trailing window that must be present before an hour is judged."""


def implausible_hours(
    generation: pd.DataFrame, *, low: float = LOW, high: float = HIGH, window_h: int = WINDOW_H
) -> pd.Series:
    """Whether each hour's total generation is outside [low, high] × its trailing median."""
    total = generation.sum(axis=1, min_count=1)
    reference = total.rolling(f"{window_h}h", min_periods=MIN_HOURS, closed="left").median()
    ratio = total / reference
    flags: pd.Series = ((ratio < low) | (ratio > high)).fillna(False).astype(bool)
    return flags


def screened(history: CarbonHistory) -> tuple[CarbonHistory, pd.DatetimeIndex]:
    """The history with its implausible hours made gaps, and those hours' timestamps.

    A history without generation data (Electricity Maps) is returned as it is.
    """
    if history.generation is None:
        return history, pd.DatetimeIndex([])
    bad = implausible_hours(history.generation)
    hours = pd.DatetimeIndex(bad.index[bad.to_numpy()])
    if not len(hours):
        return history, hours
    intensity = history.intensity.copy()
    intensity.loc[intensity.index.isin(hours)] = np.nan
    generation = history.generation.copy()
    generation.loc[generation.index.isin(hours)] = np.nan
    mix = None if history.fuel_mix is None else history.fuel_mix.copy()
    if mix is not None:
        mix.loc[mix.index.isin(hours)] = np.nan
    return (
        dataclasses.replace(history, intensity=intensity, generation=generation, fuel_mix=mix),
        hours,
    )
