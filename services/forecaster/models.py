"""The carbon forecaster: reference models, a gradient-boosted ratio model, and the blender.

:func:`fit_forecaster` fits everything on a history (split in time into a fitting part and
a validation part), weights the candidates per horizon bucket by their inverse validation
MAPE (raised to :attr:`ForecasterConfig.blend_power`), derives p10/p90 from the blend's
validation residual quantiles per horizon, then refits the boosted model on the whole
history.
:meth:`CarbonForecaster.forecast` issues one forecast; :meth:`CarbonForecaster.predict`
does many origins at once for the backtest. Both read only ``y[:origin]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from services.forecaster.baselines import (
    HoltWintersParams,
    fit_holt_winters,
    min_history_h,
)
from services.forecaster.blend import (
    blend,
    blend_weights,
    log_quantiles,
    mape_scale,
)
from services.forecaster.booster_rows import (
    aligned_origins,
    booster_base_forecast,
    booster_matrix,
    reference_forecasts,
    training_rows,
)
from services.forecaster.config import BUCKETS, CANDIDATES, MIX, BoosterBase, ForecasterConfig
from services.forecaster.features import (
    HourlyGrid,
    to_grid,
)
from services.forecaster.gbm import RatioBooster, fit_ratio_booster
from services.forecaster.mix import (
    EmissionFactors,
    fit_emission_factors,
)
from services.forecaster.sources import CarbonHistory, EmissionFactor, Signal

__all__ = ["CarbonForecast", "CarbonForecaster", "SharedFits", "fit_forecaster"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class CarbonForecast:
    """An hourly carbon-intensity forecast with p10/p90 bounds."""

    region: str
    issued_at: pd.Timestamp
    """Timestamp of the first value (the origin); inputs ended at least 1 h before it."""
    step_s: int
    """Seconds between values (3600)."""
    values: tuple[float, ...]
    """Point forecast, gCO2/kWh."""
    p10: tuple[float, ...]
    """10th percentile per step."""
    p90: tuple[float, ...]
    """90th percentile per step."""
    signal: Signal
    emission_factor: EmissionFactor
    model: str
    """Which candidate produced each horizon bucket, e.g. ``"1-6h:hw|7-24h:gbm"``."""

    def times(self) -> pd.DatetimeIndex:
        """Return the timestamp of every value."""
        return pd.date_range(self.issued_at, periods=len(self.values), freq=f"{self.step_s}s")


@dataclass(frozen=True, slots=True, kw_only=True)
class CarbonForecaster:
    """A fitted forecaster for one region; immutable and safe to share."""

    region: str
    signal: Signal
    emission_factor: EmissionFactor
    horizon_h: int
    hw_params: HoltWintersParams
    booster: RatioBooster
    weights: FloatArray
    """``(H, len(CANDIDATES))`` blend weight of each candidate per horizon (rows sum to 1)."""
    log_quantiles: FloatArray
    """``(H, 2)`` p10/p90 of log(actual / forecast) per horizon on validation."""
    validation_mape: dict[str, list[float]] = field(default_factory=dict)
    """Validation MAPE per candidate (and ``"chosen"``) and bucket of :data:`BUCKETS`."""
    candidates: tuple[str, ...] = CANDIDATES
    """The blended models, in the column order of :attr:`weights`."""
    emission_factors: EmissionFactors | None = None
    """Fitted per-fuel factors of the source-production member (``None``: not used)."""
    mix_feature: bool = False
    """Whether the booster reads the source-production forecast (see the config)."""
    mix_share_features: bool = False
    """Whether the booster reads the forecast mix's shares (see the config)."""
    mix_features_max_h: int | None = None
    """Longest horizon whose booster reads those features (see the config)."""
    booster_base: BoosterBase = "template"
    """What the booster's log-ratio multiplies (see the config)."""
    point_scale: FloatArray | None = None
    """``(H,)`` factor the blend is multiplied by per horizon (``None``: 1; see
    :attr:`ForecasterConfig.mape_scale`)."""
    context_names: tuple[str, ...] = ()
    """Context regions the booster reads (empty: none; see
    :attr:`ForecasterConfig.context_features`); a grid to forecast must carry them."""
    holiday_features: bool = False
    """Whether the booster reads the holiday calendar (see the config)."""
    solar_features: bool = False
    """Whether the booster reads the sun's path (see the config)."""

    @property
    def uses_mix(self) -> bool:
        """Whether :data:`MIX` is computed (as a member or the booster's log-ratio feature)."""
        return MIX in self.candidates or self.mix_feature

    def predict(
        self, grid: HourlyGrid, origins: IntArray, horizon_h: int | None = None
    ) -> dict[str, FloatArray]:
        """Forecast many origins of one grid at once.

        Returns:
            ``(n, H)`` arrays: every candidate, ``"chosen"`` (the blend), ``"p10"`` and
            ``"p90"``.

        Raises:
            ValueError: when an origin has too little history or lies past the grid end.
        """
        horizon = self.horizon_h if horizon_h is None else horizon_h
        if horizon > self.horizon_h:
            raise ValueError(f"fitted for {self.horizon_h} h, asked for {horizon} h")
        origins = np.asarray(origins, dtype=np.int64)
        need = min_history_h(self.horizon_h)
        if origins.size and (origins.min() < need or origins.max() > len(grid)):
            raise ValueError(f"each origin needs {need} h of history and must be <= grid end")
        if grid.context_names != self.context_names and self.context_names:
            raise ValueError(
                f"the {self.region} forecaster reads the context {self.context_names}, "
                f"the history carries {grid.context_names}"
            )
        template, out = reference_forecasts(
            grid,
            origins,
            self.horizon_h,
            self.hw_params,
            self.emission_factors if self.uses_mix else False,
        )
        features = booster_matrix(
            grid,
            origins,
            self.horizon_h,
            template,
            out,
            (self.mix_feature, self.mix_share_features, self.mix_features_max_h),
            bool(self.context_names),
            self.holiday_features,
            self.solar_features,
        )
        base = booster_base_forecast(template, out, self.booster_base)
        out["gbm"] = base * np.exp(self.booster.predict(features).reshape(template.shape))
        out["chosen"] = blend(out, self.weights, self.candidates)
        if self.point_scale is not None:
            out["chosen"] = out["chosen"] * self.point_scale[None, :]
        out["p10"] = out["chosen"] * np.exp(self.log_quantiles[:, 0])[None, :]
        out["p90"] = out["chosen"] * np.exp(self.log_quantiles[:, 1])[None, :]
        return {name: values[:, :horizon] for name, values in out.items()}

    def forecast(
        self, history_until_origin: CarbonHistory, origin: pd.Timestamp, horizon_h: int = 24
    ) -> CarbonForecast:
        """Issue the forecast for ``[origin, origin + horizon_h)``.

        Anything in ``history_until_origin`` later than ``origin - 1 h`` is ignored, so a
        caller cannot leak the future; if the newest point is older, the gap is forecast
        too and dropped.
        """
        origin = pd.Timestamp(origin).floor("h")
        grid = to_grid(history_until_origin.until(origin - pd.Timedelta(hours=1)))
        gap = grid.index_of(origin) - len(grid)
        if gap + horizon_h > self.horizon_h:
            raise ValueError(f"history ends {gap} h before the origin; too stale to forecast")
        result = self.predict(grid, np.array([len(grid)]), gap + horizon_h)
        cut = slice(gap, gap + horizon_h)
        return CarbonForecast(
            region=self.region,
            issued_at=origin,
            step_s=3600,
            values=tuple(float(v) for v in result["chosen"][0, cut]),
            p10=tuple(float(v) for v in result["p10"][0, cut]),
            p90=tuple(float(v) for v in result["p90"][0, cut]),
            signal=self.signal,
            emission_factor=self.emission_factor,
            model=self.describe_choice(),
        )

    def describe_choice(self) -> str:
        """Return the blend per bucket, e.g. ``"1-3h:0.61*hw+0.27*gbm+0.12*template_level|..."``.

        Candidates with weight below 0.005 are left out of the description.
        """
        parts = []
        for lo, hi in BUCKETS:
            if lo > self.horizon_h:
                break
            row = self.weights[lo - 1]
            terms = [
                f"{row[k]:.2f}*{self.candidates[k]}" for k in np.argsort(-row) if row[k] >= 0.005
            ]
            parts.append(f"{lo}-{hi}h:" + "+".join(terms))
        return "|".join(parts)


@dataclass(slots=True)
class SharedFits:
    """In-process memo of the fit parts that the regions of one pool share.

    Every region of a pool (the seven EIA balancing authorities) trains its booster on the
    same rows: all members' grids, cut at the same end and, while validating, at the same
    split, concatenated in a fixed (sorted) order. Their Holt-Winters constants per region
    and split are likewise the same whichever region is being fitted. Passing one
    ``SharedFits`` to the fits of all members computes each part once instead of once per
    member; the fitted forecasters are identical with or without it.
    """

    hw: dict[tuple[object, ...], HoltWintersParams] = field(default_factory=dict)
    boosters: dict[tuple[object, ...], RatioBooster] = field(default_factory=dict)


def _grid_key(history: CarbonHistory, grid: HourlyGrid) -> tuple[object, ...]:
    """Content fingerprint of one member's grid (the memo key of its fitted parts)."""
    return (
        history.region,
        history.source,
        str(grid.start),
        len(grid),
        float(np.nansum(grid.y)),
        float(np.nansum(grid.shares)),
        float(np.nansum(grid.generation)),
        int(grid.observed.sum()),
        grid.context_names,
        float(np.nansum(grid.context)),
    )


def fit_forecaster(
    history: CarbonHistory,
    fuel_mix: pd.DataFrame | None = None,
    config: ForecasterConfig | None = None,
    related: Sequence[CarbonHistory] = (),
    shared: SharedFits | None = None,
) -> CarbonForecaster:
    """Fit, choose and calibrate a forecaster on one region's history.

    Args:
        history: the training history (everything in it is treated as the past).
        fuel_mix: shares to use instead of ``history.fuel_mix`` (same index), if given.
        config: settings; defaults to :class:`ForecasterConfig`.
        related: other regions' histories with the same fuel-mix columns, pooled into the
            boosted model's training rows (worth it when the region's own history is short,
            as with the seven months of EIA-930 training data). They are cut at the end of
            ``history`` and, while validating, at the validation split, like the region's own.
        shared: memo shared by the fits of one pool's members (see :class:`SharedFits`);
            it saves time only, the result is the same.

    Raises:
        ValueError: when the history is too short to fit and validate, or a related
            history has other fuel-mix columns.
    """
    cfg = config if config is not None else ForecasterConfig()
    memo = shared if shared is not None else SharedFits()
    if fuel_mix is not None:
        history = dataclasses.replace(history, fuel_mix=fuel_mix)
    grid = to_grid(history)
    horizon, need = cfg.horizon_h, min_history_h(cfg.horizon_h)
    last_origin = len(grid) - horizon
    split = need + int((1.0 - cfg.validation_fraction) * (last_origin - need))
    if split - horizon - need < 30 * 24 or last_origin - split < 14 * 24:
        raise ValueError(f"history of {history.region} too short to fit and validate")
    split_time = grid.start + pd.Timedelta(hours=split)
    end_time = grid.start + pd.Timedelta(hours=len(grid) - 1)

    def with_hw(
        member: CarbonHistory, other: HourlyGrid
    ) -> tuple[tuple[object, ...], HourlyGrid, HoltWintersParams]:
        key = _grid_key(member, other)
        hw_key = (key, str(split_time), cfg.hw_fit_days)
        if hw_key not in memo.hw:
            cut = other.index_of(split_time)
            memo.hw[hw_key] = fit_holt_winters(other.y[max(0, cut - cfg.hw_fit_days * 24) : cut])
        return key, other, memo.hw[hw_key]

    own = with_hw(history, grid)
    hw_params = own[2]
    members = [own]
    for other in related:
        other_grid = to_grid(other.until(end_time))
        if other_grid.share_names != grid.share_names:
            raise ValueError(f"{other.region} has other fuel-mix columns than {history.region}")
        if cfg.context_features and other_grid.context_names != grid.context_names:
            raise ValueError(f"{other.region} has another context than {history.region}")
        if other_grid.index_of(split_time) > need + horizon:
            members.append(with_hw(other, other_grid))
    # A fixed order (by fingerprint), so every member of a pool trains the same booster.
    members.sort(key=lambda member: repr(member[0]))
    sources = [(member_grid, params) for _, member_grid, params in members]
    pool_key = tuple(key for key, _, _ in members)
    if not any(member_grid.generation_names for member_grid, _ in sources):
        # No member has generation data: the features would be missing in every row.
        cfg = dataclasses.replace(cfg, mix_feature=False, mix_share_features=False)
    if not grid.context_names:
        cfg = dataclasses.replace(cfg, context_features=False)
    context_names = grid.context_names if cfg.context_features else ()

    def booster_until(row_end: pd.Timestamp) -> RatioBooster:
        # Settings that act after the booster do not split the memo.
        key = (
            pool_key,
            str(row_end),
            dataclasses.replace(cfg, mape_scale=False, blend_stack_share=0.0),
        )
        if key not in memo.boosters:
            memo.boosters[key] = fit_ratio_booster(
                *training_rows(sources, row_end, cfg),
                seed=cfg.seed,
                max_iter=cfg.booster_max_iter,
                buckets=cfg.booster_buckets,
                bag=cfg.booster_bag,
            )
        return memo.boosters[key]

    # Emission factors of the source-production member: for validation from the hours
    # before the split, for the final model from the whole history.
    uses_mix = cfg.mix_member or cfg.mix_feature
    factors_split = fit_emission_factors(grid, split) if uses_mix else None
    factors_end = fit_emission_factors(grid) if uses_mix else None
    candidates = (*CANDIDATES, MIX) if cfg.mix_member and factors_split is not None else CANDIDATES
    # Fitting targets end before the split so that none reaches the validation span.
    booster = booster_until(split_time - pd.Timedelta(hours=1))
    provisional = CarbonForecaster(
        region=history.region,
        signal=history.signal,
        emission_factor=history.emission_factor,
        horizon_h=horizon,
        hw_params=hw_params,
        booster=booster,
        weights=np.tile(np.eye(len(candidates))[candidates.index("gbm")], (horizon, 1)),
        log_quantiles=np.zeros((horizon, 2)),
        candidates=candidates,
        emission_factors=factors_split,
        mix_feature=cfg.mix_feature,
        mix_share_features=cfg.mix_share_features,
        mix_features_max_h=cfg.mix_features_max_h,
        booster_base=cfg.booster_base,
        context_names=context_names,
        holiday_features=cfg.holiday_features,
        solar_features=cfg.solar_features,
    )
    val_origins = aligned_origins(split, last_origin, cfg.validation_stride_h, grid.start)
    predictions = provisional.predict(grid, val_origins)
    for derived in ("chosen", "p10", "p90"):
        predictions.pop(derived)
    targets = val_origins[:, None] + np.arange(horizon)[None, :]
    actual, mask = grid.y[targets], grid.observed[targets].astype(np.float64)
    weights, scores = blend_weights(
        predictions, actual, mask, horizon, cfg.blend_power, candidates, cfg.blend_stack_share
    )
    blended = blend(predictions, weights, candidates)
    point_scale = mape_scale(blended, actual, mask) if cfg.mape_scale else None
    if point_scale is not None:
        blended = blended * point_scale[None, :]
    quantiles = log_quantiles(blended, actual, mask, cfg.quantile_pool_h)
    return CarbonForecaster(
        region=history.region,
        signal=history.signal,
        emission_factor=history.emission_factor,
        horizon_h=horizon,
        hw_params=hw_params,
        booster=booster_until(end_time),
        weights=weights,
        log_quantiles=quantiles,
        validation_mape=scores,
        candidates=candidates,
        emission_factors=factors_end,
        mix_feature=cfg.mix_feature,
        mix_share_features=cfg.mix_share_features,
        mix_features_max_h=cfg.mix_features_max_h,
        booster_base=cfg.booster_base,
        point_scale=point_scale,
        context_names=context_names,
        holiday_features=cfg.holiday_features,
        solar_features=cfg.solar_features,
    )
