"""Public holidays for the booster (docs/forecaster.md, *Public holidays*; ``holiday_features``)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pandas as pd

from services.forecaster.baselines import seven_day_template
from services.forecaster.features import gbm_features, to_grid
from services.forecaster.holidays import holiday_hours, nerc_holidays
from services.forecaster.sources import CarbonHistory
from tests.unit.forecaster.conftest import fit_80_days, synthetic_history


def test_nerc_holidays_move_a_sunday_holiday_to_monday_and_keep_a_saturday_one() -> None:
    """Test 2022 (New Year on a Saturday, Christmas on a Sunday) and 2023 (New Year on a
    Sunday): NERC moves Sunday holidays to Monday only."""
    assert nerc_holidays(2022) == [
        dt.date(2022, 1, 1),
        dt.date(2022, 5, 30),
        dt.date(2022, 7, 4),
        dt.date(2022, 9, 5),
        dt.date(2022, 11, 24),
        dt.date(2022, 12, 26),
    ]
    assert nerc_holidays(2023)[0] == dt.date(2023, 1, 2)
    assert nerc_holidays(2021)[2] == dt.date(2021, 7, 5)


def test_holiday_hours_follow_the_regions_local_date() -> None:
    """Test that Independence Day 2022 covers 04:00-03:00 UTC in New York and 07:00-06:00
    UTC in Phoenix, and that a region without a calendar has no holiday."""
    start = pd.Timestamp("2022-07-04 00:00", tz="UTC")
    pjm = holiday_hours("PJM", start, 48)
    assert np.flatnonzero(pjm).tolist() == list(range(4, 28))
    azps = holiday_hours("AZPS", start, 48)
    assert np.flatnonzero(azps).tolist() == list(range(7, 31))
    assert not holiday_hours("GB", start, 48).any()
    assert not holiday_hours("PJM", start, 0).size


def _pjm_summer() -> CarbonHistory:
    """The synthetic history moved to June-July 2022 and named PJM (Independence Day)."""
    base = synthetic_history(days=50)
    index = pd.date_range("2022-06-01", periods=len(base.intensity), freq="h", tz="UTC")
    return dataclasses.replace(
        base,
        region="PJM",
        intensity=base.intensity.set_axis(index),
        fuel_mix=None,
        generation=None,
    )


def test_holiday_columns_flag_the_target_and_the_hours_its_baselines_read() -> None:
    """Test the three columns at origins around Independence Day 2022 (New York: 04:00 UTC
    July 4 to 03:00 UTC July 5), one of them at the grid's end (targets past the history)."""
    grid = to_grid(_pjm_summer())
    july = [pd.Timestamp(f"2022-07-{day:02d} 04:00", tz="UTC") for day in (3, 5, 10, 17)]
    origins = np.array([grid.index_of(t) for t in july] + [len(grid)], dtype=np.int64)
    template = seven_day_template(grid.y, origins, 48)
    features, names = gbm_features(grid, origins, 48, template, {}, holidays=True)
    rows = features.reshape(len(origins), 48, -1)
    target, in_template, yesterday = (
        rows[:, :, names.index(name)]
        for name in ("holiday_target", "holiday_in_template", "holiday_same_hour_yesterday")
    )
    day, zero = [1.0] * 24, [0.0] * 24
    # From July 3, day 2 is the holiday; nothing before it was one.
    assert target[0].tolist() == zero + day
    assert not in_template[0].any()
    assert not yesterday[0].any()
    # From July 5, both days' same-hour-yesterday is the holiday (k = 1: t - 24; k = 2: t - 48)
    # and so is one of the seven template days.
    assert not target[1].any()
    assert yesterday[1].tolist() == day + day
    assert in_template[1].tolist() == day + day
    # From July 10 only the template still reads it (its oldest days); a week later nothing.
    assert in_template[2].tolist() == day + day
    assert not yesterday[2].any()
    assert not in_template[3].any()
    # Past the grid's end (July 21 on): no holiday, but the columns are filled.
    assert not np.isnan(rows[4]).any()
    without, _ = gbm_features(grid, origins, 48, template, {})
    assert features.shape[1] == without.shape[1] + 3


def test_a_forecaster_with_holidays_fits_and_forecasts_across_one() -> None:
    """Test that the option reaches the fitted forecaster and a forecast whose horizon
    crosses a holiday runs (the calendar covers hours after the history)."""
    history = dataclasses.replace(synthetic_history(), region="PJM")
    fitted = fit_80_days(history, booster_bag=1, holiday_features=True)
    assert fitted.holiday_features
    origin = pd.Timestamp("2023-03-21 00:00", tz="UTC")
    forecast = fitted.forecast(history, origin, horizon_h=24)
    assert len(forecast.values) == 24
    assert all(np.isfinite(forecast.values))
