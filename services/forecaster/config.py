"""Settings of the carbon forecaster and the names of its horizon buckets and blend members.

Kept apart from :mod:`services.forecaster.models` so the blender, the backtest and the
tools can read them without the fitting code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final, Literal

from services.forecaster.gbm import BOOSTER_BUCKETS

__all__ = [
    "BUCKETS",
    "CANDIDATES",
    "MIX",
    "RECENT_BAND_DAYS",
    "BoosterBase",
    "ForecasterConfig",
    "config_for",
]

BUCKETS: Final = ((1, 3), (4, 6), (7, 12), (13, 24), (25, 36), (37, 48))
"""Disjoint horizon buckets (hours, inclusive), each with its own blend weights. Finer than
the reported buckets because the candidates' relative skill changes fast in the first
hours (Holt-Winters) and across the day (the booster)."""
CANDIDATES: Final = ("same_hour_yesterday", "template_level", "hw", "gbm")
"""The models blended by default, in the column order of :attr:`CarbonForecaster.weights`."""
MIX: Final = "mix"
"""The source-production member (:mod:`services.forecaster.mix`): intensity of the
per-fuel forecast mix. A blend member only with :attr:`ForecasterConfig.mix_member`, and
only for regions with generation data."""
BoosterBase = Literal["template", "template_level"]
"""The forecast the booster's log-ratio is taken against (see
:attr:`ForecasterConfig.booster_base`)."""

RECENT_BAND_DAYS: Final = 28
"""Days of issued forecasts whose realised errors set the p10/p90 band (fixed a priori, not
tuned; kept on both inner validations, docs/forecaster.md, *Bands from recent errors*)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForecasterConfig:
    """Settings of :func:`fit_forecaster`."""

    horizon_h: int = 48
    """Longest horizon the forecaster is fitted and validated for."""
    validation_fraction: float = 0.3
    """Share of the usable history (the latest part) held out to choose and calibrate."""
    train_stride_h: int = 2
    """Spacing of training origins for the boosted model (every hour is redundant)."""
    max_training_rows: int = 300_000
    """Cap on boosted-model rows; the origin stride widens on long histories to respect it."""
    validation_stride_h: int = 6
    """Spacing of validation origins."""
    hw_fit_days: int = 60
    """Days of the fitting part used to estimate the Holt-Winters parameters."""
    quantile_pool_h: int = 2
    """Horizons either side pooled when estimating residual quantiles."""
    booster_max_iter: int = 150
    """Boosting rounds of the ratio model (per horizon bucket)."""
    booster_buckets: tuple[tuple[int, int], ...] = BOOSTER_BUCKETS
    """Horizon buckets with a booster each (``((1, 48),)``: one booster for all horizons)."""
    blend_power: float = 4.0
    """Blend weight of a candidate in a bucket is proportional to validation MAPE ** -power
    (0: equal weights; large: pick the best)."""
    blend_stack_share: float = 0.0
    """How far the blend weights move from the inverse-error weights above toward the
    convex weights that minimise the bucket's validation MAPE jointly
    (:func:`~services.forecaster.blend.stacked_weights`): 0 keeps the inverse-error
    weights, 1 takes the fitted ones. Not kept on inner validation (docs/forecaster.md,
    *Blend weights fitted to the metric*)."""
    seed: int = 0
    """Random seed of the boosted model."""
    booster_half_life_days: float | None = None
    """If set, a training row's weight halves every this many days its target lies before
    the end of the training rows (recency weighting); ``None``: equal weights."""
    mix_member: bool = False
    """Blend the source-production forecast (:data:`MIX`) as a fifth member where the
    region has generation data. Off: not kept on inner validation (docs/forecaster.md)."""
    mix_feature: bool = True
    """Give the booster the source-production forecast's log-ratio to the template as a
    feature (missing for pooled rows without generation data; off by itself wherever no
    pooled history has generation data, e.g. Electricity Maps). Kept on inner validation
    together with the next two settings (docs/forecaster.md, *Source-production tier*)."""
    mix_share_features: bool = True
    """Give the booster the forecast mix's share of every fuel at the target hour
    (:func:`services.forecaster.mix.forecast_shares`; missing without generation data)."""
    mix_features_max_h: int | None = 24
    """If set, only the boosters of horizons up to this many hours see the two features
    above (longer horizons get a constant); ``None``: every horizon. 24: with them the
    day-2 booster lost on inner validation, the day-1 boosters gained."""
    booster_base: BoosterBase = "template_level"
    """What the booster's target is the log-ratio to, and its forecast multiplies:
    ``"template"`` (the 7-day template) or ``"template_level"`` (template + level, floored
    at :data:`~services.forecaster.features.FLOOR_G`), so the trees learn only the
    correction to the better baseline instead of rebuilding its level shift. The features
    are the same either way. ``"template_level"``: kept on inner validation together with
    the bag below (docs/forecaster.md, *Stronger ratio base and bagged boosters*)."""
    booster_bag: int = 3
    """Boosters averaged per horizon bucket (log-ratio space), each with its own seed and a
    random 70 % of the features at every split (:func:`fit_ratio_booster`'s ``bag``); 1:
    the single booster. 3: kept on inner validation (three times the booster fit cost)."""
    mape_scale: bool = False
    """Scale the blend per bucket of :data:`BUCKETS` by the factor that minimises its
    validation MAPE (:func:`~services.forecaster.blend.mape_scale`): the MAPE-optimal point
    forecast of a positive quantity lies below its median. Not kept on inner validation, so
    off (docs/forecaster.md, *A point forecast for the metric*)."""
    context_features: bool = False
    """Give the booster the recent level ratios of the regions in the histories' context
    (:func:`~services.forecaster.sources.with_context`; docs/forecaster.md, *Cross-region
    context*).
    Without a context in the histories it does nothing."""

    holiday_features: bool = True
    """Give the booster the region's public-holiday calendar (NERC's six holidays for US
    regions, :mod:`~services.forecaster.holidays`): the target hour's flag and those of the
    hours its template and same-hour-yesterday read. On: kept on the EIA inner validation
    (docs/forecaster.md, *Public holidays*); Electricity Maps histories go without it
    (:func:`config_for`)."""

    solar_features: bool = False
    """Give the booster the sun's path (:mod:`~services.forecaster.sun`): how far the
    clear-sky proxy at the target hour is from its mean over the template's hours and from
    the same-hour-yesterday hour's (docs/forecaster.md, *The sun's path*)."""
    recent_band_days: int = RECENT_BAND_DAYS
    """If > 0, the p10/p90 band of a forecast comes from the realised errors of the forecasts
    issued in that many days before it (:mod:`~services.forecaster.bands`), once they span
    two weeks; 0: the fit's validation band, whose p10-p90 covered 0.67-0.87 of the actuals
    across regions where the recent errors' band covers 0.75-0.79. Not part of a fit: the
    backtest and the live service apply it to what they issue (docs/forecaster.md,
    *Bands from recent errors*)."""

    def __post_init__(self) -> None:
        if self.horizon_h < 1 or self.horizon_h > BUCKETS[-1][1]:
            raise ValueError(f"horizon_h must be in 1..{BUCKETS[-1][1]}")
        if not 0.05 <= self.validation_fraction <= 0.5:
            raise ValueError("validation_fraction must be in [0.05, 0.5]")
        edges = [h for lo, hi in self.booster_buckets for h in (lo, hi)]
        if (
            edges[0] != 1
            or edges[-1] < self.horizon_h
            or any(nxt != prev + 1 for prev, nxt in zip(edges[1:-1:2], edges[2::2], strict=True))
        ):
            raise ValueError("booster_buckets must tile 1..horizon_h without gaps")
        if self.booster_base not in ("template", "template_level"):
            raise ValueError("booster_base must be 'template' or 'template_level'")
        if not 0.0 <= self.blend_stack_share <= 1.0:
            raise ValueError("blend_stack_share must be in [0, 1]")
        if self.booster_bag < 1:
            raise ValueError("booster_bag must be at least 1")


def config_for(source: str, base: ForecasterConfig | None = None) -> ForecasterConfig:
    """The settings for one source's histories (``"eia"`` or ``"em"``), from ``base``.

    Electricity Maps histories get the booster without the booster-base levers (the ratio
    to the template, one booster): R and G were chosen on the EIA inner validation, and on
    Electricity Maps' own (2021-2022 fit, 2023 origins) they did not improve both the
    relative score and the day-1 mean (docs/forecaster.md, "The booster-base levers on
    Electricity Maps"). Nor do they read the holiday calendar: it was
    validated on EIA only, and four of the seven zones have none. Other sources keep
    ``base`` as it is.
    """
    cfg = base if base is not None else ForecasterConfig()
    if source == "em":
        return dataclasses.replace(
            cfg, booster_base="template", booster_bag=1, holiday_features=False
        )
    return cfg
