"""What the forecaster's booster reads and learns: reference forecasts, design rows, targets.

:func:`fit_forecaster <services.forecaster.models.fit_forecaster>` and
:meth:`CarbonForecaster.predict <services.forecaster.models.CarbonForecaster.predict>` build
the booster's inputs here, so training and forecasting cannot drift apart: the template and
the reference models at each origin (:func:`reference_forecasts`), the feature matrix with
the source-production and optional context and holiday columns (:func:`booster_matrix`),
and the pooled training rows with their log-ratio targets (:func:`training_rows`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from services.forecaster.baselines import (
    HoltWintersParams,
    holt_winters,
    min_history_h,
    same_hour_yesterday,
    seven_day_template,
    template_plus_level,
)
from services.forecaster.config import MIX, BoosterBase, ForecasterConfig
from services.forecaster.features import (
    FLOOR_G,
    HORIZON_COLUMN,
    HourlyGrid,
    gbm_features,
    log_ratio,
)
from services.forecaster.mix import (
    EmissionFactors,
    fit_emission_factors,
    forecast_shares,
    mix_forecast,
)

__all__ = [
    "aligned_origins",
    "booster_base_forecast",
    "booster_matrix",
    "reference_forecasts",
    "training_rows",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def reference_forecasts(
    grid: HourlyGrid,
    origins: IntArray,
    horizon_h: int,
    hw: HoltWintersParams,
    mix: EmissionFactors | bool | None = False,
) -> tuple[FloatArray, dict[str, FloatArray]]:
    """The template and the reference models; with ``mix`` (factors, or ``None`` for a
    region without them) also :data:`MIX`, all NaN where it cannot be computed."""
    y = grid.y
    template = seven_day_template(y, origins, horizon_h)
    refs = {
        "same_hour_yesterday": same_hour_yesterday(y, origins, horizon_h),
        "template_level": template_plus_level(y, origins, horizon_h),
        "hw": holt_winters(y, origins, horizon_h, hw),
    }
    if mix is not False:
        if isinstance(mix, EmissionFactors) and grid.generation_names == mix.names:
            refs[MIX] = mix_forecast(grid, origins, horizon_h, mix)
        else:
            refs[MIX] = np.full_like(template, np.nan)
    return template, refs


def booster_base_forecast(
    template: FloatArray, refs: dict[str, FloatArray], base: BoosterBase
) -> FloatArray:
    """The forecast the booster's log-ratio is relative to.

    The template is used as it is (as before the option existed); template + level is
    floored at :data:`FLOOR_G`, the floor :func:`log_ratio` applies to the target, because a
    falling level shift can take it below the floor where the template is near zero.
    """
    if base == "template":
        return template
    floored: FloatArray = np.maximum(refs["template_level"], FLOOR_G)
    return floored


def booster_matrix(
    grid: HourlyGrid,
    origins: IntArray,
    horizon_h: int,
    template: FloatArray,
    refs: dict[str, FloatArray],
    mix: tuple[bool, bool, int | None],
    context: bool = False,
    holidays: bool = False,
    solar: bool = False,
) -> FloatArray:
    """The booster's rows: :func:`gbm_features`, plus the source-production features.

    ``mix`` is (log-ratio feature, share features, longest horizon that sees them). With
    the log-ratio feature the matrix has ``lr_mix``; with the share features the forecast
    mix's share of each of the grid's fuel-share columns is appended (rows origin-major).
    Rows beyond the longest horizon get 0 in those columns, a constant that their bucket's
    booster cannot split on, so those buckets learn as without them.
    """
    log_ratio_feature, share_features, max_h = mix
    inputs = {name: values for name, values in refs.items() if name != MIX or log_ratio_feature}
    features, names = gbm_features(
        grid, origins, horizon_h, template, inputs, context, holidays, solar
    )
    columns = [names.index(f"lr_{MIX}")] if log_ratio_feature else []
    if share_features:
        shares = forecast_shares(grid, origins, horizon_h, grid.share_names)
        columns += list(range(features.shape[1], features.shape[1] + shares.shape[2]))
        features = np.hstack([features, shares.reshape(len(origins) * horizon_h, -1)])
    if max_h is not None and columns:
        beyond = features[:, HORIZON_COLUMN] > max_h
        features[np.ix_(beyond, np.asarray(columns, dtype=np.int64))] = 0.0
    return features


def aligned_origins(first: int, last: int, stride: int, grid_start: pd.Timestamp) -> IntArray:
    """Origins in ``[first, last]`` aligned to UTC hours that are multiples of ``stride``."""
    offset = (-(grid_start.hour + first)) % stride
    return np.arange(first + offset, last + 1, stride, dtype=np.int64)


def training_rows(
    sources: list[tuple[HourlyGrid, HoltWintersParams]],
    end: pd.Timestamp,
    cfg: ForecasterConfig,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Rows of every origin whose whole horizon ends by ``end``, over all source grids.

    With :attr:`ForecasterConfig.mix_feature`, each grid's emission factors are fitted on
    its hours up to ``end`` (the rows' own fitting span), like the booster itself.
    """
    horizon, need = cfg.horizon_h, min_history_h(cfg.horizon_h)
    spans = [
        (grid, hw, min(grid.index_of(end), len(grid) - 1) - horizon + 1) for grid, hw in sources
    ]
    total = sum(max(0, last - need) for _, _, last in spans)
    stride = max(cfg.train_stride_h, -(-total * horizon // cfg.max_training_rows))
    parts: list[tuple[FloatArray, FloatArray, FloatArray]] = []
    for grid, hw, last in spans:
        origins = aligned_origins(need, last, stride, grid.start)
        if not origins.size:
            continue
        factors = (
            fit_emission_factors(grid, min(grid.index_of(end), len(grid) - 1) + 1)
            if cfg.mix_feature
            else False
        )
        template, refs = reference_forecasts(grid, origins, horizon, hw, factors)
        features = booster_matrix(
            grid,
            origins,
            horizon,
            template,
            refs,
            (cfg.mix_feature, cfg.mix_share_features, cfg.mix_features_max_h),
            cfg.context_features,
            cfg.holiday_features,
            cfg.solar_features,
        )
        targets = origins[:, None] + np.arange(horizon)[None, :]
        target = log_ratio(
            grid.y[targets], booster_base_forecast(template, refs, cfg.booster_base)
        ).ravel()
        weight = grid.observed[targets].astype(np.float64)
        if cfg.booster_half_life_days is not None:
            age_days = (grid.index_of(end) - targets) / 24.0
            weight = weight * 0.5 ** (age_days / cfg.booster_half_life_days)
        parts.append((features, target, weight.ravel()))
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )
