"""Gradient-boosted model of the log-ratio between the actual intensity and the 7-day template.

Learning the ratio to the template (rather than the level) keeps one model valid across
seasons and makes its error scale-free, which is what MAPE scores. The rows come from
:func:`services.forecaster.features.gbm_features`; scikit-learn's
``HistGradientBoostingRegressor`` with squared loss fits the mean log-ratio.

The model is *direct multi-horizon*: one booster per horizon bucket (rows routed by their
horizon column), so the short horizons, where the last hours' level carries most of the
signal, do not share trees with day 2, where the weekly template and calendar do. With
``bag`` > 1 each bucket's model is a :class:`BoosterBag`: that many boosters with their own
seed and a random share of the features at every split, their predictions averaged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from services.forecaster.features import HORIZON_COLUMN

__all__ = [
    "BAG_MAX_FEATURES",
    "BOOSTER_BUCKETS",
    "BOOSTER_PARAMS",
    "BoosterBag",
    "RatioBooster",
    "fit_ratio_booster",
]

FloatArray = npt.NDArray[np.float64]

BOOSTER_PARAMS: Final[dict[str, Any]] = {
    "loss": "squared_error",
    "learning_rate": 0.05,
    # 150 rounds, chosen on the EIA and Electricity Maps validation spans (inside the
    # training months, docs/forecaster.md): against 300 the booster's own validation MAPE
    # fell in every set x bucket cell and the blend stayed level, at half the fit time.
    "max_iter": 150,
    "max_leaf_nodes": 31,
    "min_samples_leaf": 100,
    "l2_regularization": 1.0,
    # Early stopping would draw a random (time-shuffled) validation split; the chooser
    # validates on a later time span instead.
    "early_stopping": False,
}
"""Hyper-parameters, never searched on the test spans (``max_iter`` was picked on validation,
the rest fixed a priori); ``max_iter`` may be overridden (tests use fewer rounds)."""
BOOSTER_BUCKETS: Final = ((1, 6), (7, 24), (25, 48))
"""Horizon buckets (hours, inclusive) with a booster each."""
BAG_MAX_FEATURES: Final = 0.7
"""Share of the features each split of a bagged booster draws from (fixed a priori): with
all features and no early stopping, boosters that differ only in ``random_state`` are
identical, so the bag needs this randomness to average anything."""


@dataclass(frozen=True, slots=True)
class BoosterBag:
    """Boosters of one horizon bucket fitted with different seeds; ``predict`` averages them."""

    members: tuple[Any, ...]
    """The fitted ``HistGradientBoostingRegressor`` of each seed."""

    def predict(self, features: FloatArray) -> FloatArray:
        """Mean of the members' predictions (log-ratios) per row."""
        result: FloatArray = np.mean([member.predict(features) for member in self.members], axis=0)
        return result


@dataclass(frozen=True, slots=True)
class RatioBooster:
    """Fitted boosters, one per horizon bucket; ``predict`` returns the log-ratio per row."""

    models: tuple[Any, ...]
    """The fitted ``HistGradientBoostingRegressor`` (or :class:`BoosterBag`) of each bucket."""
    buckets: tuple[tuple[int, int], ...]
    """Horizon range (hours, inclusive) of each model."""

    def predict(self, features: FloatArray) -> FloatArray:
        """Predict the log-ratio for each row of ``features`` (routed by its horizon)."""
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

        horizon = features[:, HORIZON_COLUMN]
        result: FloatArray = np.zeros(len(features))
        with threadpool_limits(limits=1):
            for (lo, hi), model in zip(self.buckets, self.models, strict=True):
                rows = (horizon >= lo) & (horizon <= hi)
                if rows.any():
                    result[rows] = model.predict(features[rows])
        return result


def fit_ratio_booster(
    features: FloatArray,
    target: FloatArray,
    weight: FloatArray,
    seed: int = 0,
    max_iter: int | None = None,
    buckets: tuple[tuple[int, int], ...] = BOOSTER_BUCKETS,
    bag: int = 1,
) -> RatioBooster:
    """Fit one booster per horizon bucket; rows whose target hour was gap-filled get weight 0.

    Positive weights other than 1 are passed to the booster as sample weights. With
    ``bag`` > 1 each bucket gets a :class:`BoosterBag` of ``bag`` boosters, the k-th with
    ``random_state = seed + k`` and ``max_features =`` :data:`BAG_MAX_FEATURES`; ``bag`` = 1
    fits the single booster on all features, exactly as without bagging.

    Buckets that start beyond the longest horizon in ``features`` are left out.

    Raises:
        ValueError: when a bucket within the horizon range has no training row, or
            ``bag`` < 1.
    """
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    if bag < 1:
        raise ValueError("bag must be at least 1")
    params = dict(BOOSTER_PARAMS)
    if max_iter is not None:
        params["max_iter"] = max_iter
    if bag > 1:
        params["max_features"] = BAG_MAX_FEATURES
    horizon = features[:, HORIZON_COLUMN]
    used = tuple((lo, hi) for lo, hi in buckets if lo <= horizon.max())
    models: list[Any] = []
    for lo, hi in used:
        keep = (weight > 0) & (horizon >= lo) & (horizon <= hi)
        if not keep.any():
            raise ValueError(f"no training rows for horizons {lo}-{hi} h")
        # Weights other than 0/1 (recency weighting) are sample weights; plain 0/1 masks fit
        # without them, exactly as before such weights existed.
        sample_weight = weight[keep]
        members = []
        for k in range(bag):
            model = HistGradientBoostingRegressor(random_state=seed + k, **params)
            # One OpenMP thread: on a shared, busy host the default (all cores) spin-waits
            # and runs ~10x slower; the backtest parallelises over regions instead, if at all.
            with threadpool_limits(limits=1):
                model.fit(
                    features[keep],
                    target[keep],
                    sample_weight=None if np.all(sample_weight == 1.0) else sample_weight,
                )
            members.append(model)
        models.append(members[0] if bag == 1 else BoosterBag(tuple(members)))
    return RatioBooster(tuple(models), used)
