"""Vectorised reference forecasters: seasonal naive, template + level, Holt-Winters.

Conventions shared by every function here (and by :mod:`services.forecaster.features`):

- ``y`` is a gap-filled hourly series (index = hours since the grid start).
- An *origin* ``o`` is the index of the first hour to forecast. Inputs are ``y[:o]`` only:
  the newest value used is ``y[o - 1]``, one hour before the origin (no look-ahead).
- Horizon ``h`` runs 1..H and targets index ``o + h - 1``.

All functions take many origins at once and return ``(n_origins, H)`` arrays, so the
rolling-origin backtest and the live single-origin forecast run the same code.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "DAY",
    "HW_WINDOW_H",
    "LEVEL_FADE_H",
    "TEMPLATE_DAYS",
    "HoltWintersParams",
    "fit_holt_winters",
    "holt_winters",
    "min_history_h",
    "same_hour_yesterday",
    "seven_day_template",
    "template_plus_level",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DAY: Final = 24
"""Hours per season."""
TEMPLATE_DAYS: Final = 7
"""Days averaged by the template ("mean of the same hour over the last 7 days")."""
LEVEL_FADE_H: Final = 24.0
"""e-folding horizon of the template + level correction, hours."""
HW_WINDOW_H: Final = 28 * DAY
"""Hours of history each Holt-Winters run filters before forecasting."""


def min_history_h(horizon_h: int) -> int:
    """Hours of history an origin needs for every model here at ``horizon_h``."""
    return max(HW_WINDOW_H, DAY * (-(-horizon_h // DAY) + TEMPLATE_DAYS))


def _targets(origins: IntArray, horizon_h: int) -> tuple[IntArray, IntArray]:
    """Return target indices ``(n, H)`` and the whole days ``k = ceil(h / 24)`` per horizon."""
    steps = np.arange(1, horizon_h + 1, dtype=np.int64)
    days_back = -(-steps // DAY)
    return origins[:, None] + steps[None, :] - 1, days_back


def same_hour_yesterday(y: FloatArray, origins: IntArray, horizon_h: int) -> FloatArray:
    """Seasonal naive: the same hour on the most recent day that lies before the origin."""
    targets, days_back = _targets(origins, horizon_h)
    result: FloatArray = y[targets - DAY * days_back[None, :]]
    return result


def seven_day_template(y: FloatArray, origins: IntArray, horizon_h: int) -> FloatArray:
    """Mean of the same hour over the 7 most recent days available before the origin."""
    targets, days_back = _targets(origins, horizon_h)
    lags = DAY * (days_back[None, :, None] + np.arange(TEMPLATE_DAYS)[None, None, :])
    result: FloatArray = y[targets[:, :, None] - lags].mean(axis=2)
    return result


def template_plus_level(
    y: FloatArray, origins: IntArray, horizon_h: int, fade_h: float = LEVEL_FADE_H
) -> FloatArray:
    """The README's "template + level" forecaster.

    The 7-day template is shifted by the gap between the last 24 h mean and the last 7 days'
    mean (the template's own level); the shift fades as ``exp(-h / fade_h)``.
    """
    template = seven_day_template(y, origins, horizon_h)
    window = origins[:, None] - np.arange(1, TEMPLATE_DAYS * DAY + 1)[None, :]
    recent = y[window]
    offset = recent[:, :DAY].mean(axis=1) - recent.mean(axis=1)
    fade = np.exp(-np.arange(1, horizon_h + 1) / fade_h)
    result: FloatArray = template + offset[:, None] * fade[None, :]
    return result


@dataclass(frozen=True, slots=True)
class HoltWintersParams:
    """Additive damped Holt-Winters smoothing parameters (statsmodels' parametrisation)."""

    alpha: float
    """Level smoothing."""
    beta: float
    """Trend smoothing."""
    gamma: float
    """Seasonal smoothing."""
    phi: float
    """Trend damping."""


def fit_holt_winters(y: FloatArray) -> HoltWintersParams:
    """Estimate Holt-Winters parameters with statsmodels on a training stretch.

    Parameters are fitted once per region; :func:`holt_winters` then re-filters a fixed
    window before each origin with them, which is causal and vectorises over origins.
    """
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    model = ExponentialSmoothing(
        y,
        trend="add",
        damped_trend=True,
        seasonal="add",
        seasonal_periods=DAY,
        initialization_method="estimated",
    )
    with warnings.catch_warnings():
        # statsmodels warns when its optimiser stops at an iteration cap; the estimate is
        # still a usable set of smoothing constants for re-filtering.
        warnings.simplefilter("ignore")
        fitted = model.fit()
    params = fitted.params
    return HoltWintersParams(
        alpha=float(params["smoothing_level"]),
        beta=float(params["smoothing_trend"]),
        gamma=float(params["smoothing_seasonal"]),
        phi=float(params["damping_trend"]),
    )


def holt_winters(
    y: FloatArray,
    origins: IntArray,
    horizon_h: int,
    params: HoltWintersParams,
    window_h: int = HW_WINDOW_H,
) -> FloatArray:
    """Forecast with additive damped Holt-Winters filtered over ``window_h`` hours per origin.

    Initial state per origin: level = mean of the window's first day, trend = 0, seasonal =
    the mean daily profile of the last week before the origin, minus its mean. The recursion
    (Hyndman & Athanasopoulos §8.3, as in statsmodels) then runs over the window, vectorised
    across origins.
    """
    if window_h % DAY:
        raise ValueError("window_h must be a whole number of days")
    a, b, g, phi = params.alpha, params.beta, params.gamma, params.phi
    start = origins - window_h
    # The seasonal profile starts from the last week before the origin (still causal): with
    # the small seasonal smoothing statsmodels tends to fit, a profile from the start of the
    # window would otherwise be a month stale at the origin.
    last_week = y[(origins - 7 * DAY)[:, None] + np.arange(7 * DAY)[None, :]]
    last_week = last_week.reshape(-1, 7, DAY)
    level = y[start[:, None] + np.arange(DAY)[None, :]].mean(axis=1)
    trend = np.zeros_like(level)
    # seasonal[:, j] is the component for hour index congruent to (start + j) mod 24;
    # window_h is a whole number of days, so slot j of the last week lines up with it.
    seasonal = last_week.mean(axis=1) - last_week.mean(axis=(1, 2))[:, None]
    rows = np.arange(len(origins))
    for step in range(window_h):
        obs = y[start + step]
        slot = step % DAY
        season = seasonal[rows, slot]
        prior = level + phi * trend
        new_level = a * (obs - season) + (1.0 - a) * prior
        trend = b * (new_level - level) + (1.0 - b) * phi * trend
        seasonal[rows, slot] = g * (obs - prior) + (1.0 - g) * season
        level = new_level
    steps = np.arange(1, horizon_h + 1)
    damp = np.cumsum(phi ** steps.astype(np.float64))
    slots = (window_h + steps - 1) % DAY
    out: FloatArray = level[:, None] + damp[None, :] * trend[:, None] + seasonal[:, slots]
    return out
