"""Gradient-boosted model of the log-ratio between the actual intensity and the 7-day template.

Learning the ratio to the template (rather than the level) keeps one model valid across
seasons and makes its error scale-free, which is what MAPE scores. The rows come from
:func:`services.forecaster.features.gbm_features`; scikit-learn's
``HistGradientBoostingRegressor`` with squared loss fits the mean log-ratio.

The model is *direct multi-horizon*: one booster per horizon bucket (rows routed by their
horizon column), so the short horizons, where the last hours' level carries most of the
signal, do not share trees with day 2, where the weekly template and calendar do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from services.forecaster.features import HORIZON_COLUMN

__all__ = ["BOOSTER_BUCKETS", "BOOSTER_PARAMS", "RatioBooster", "fit_ratio_booster"]

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


@dataclass(frozen=True, slots=True)
class RatioBooster:
    """Fitted boosters, one per horizon bucket; ``predict`` returns the log-ratio per row."""

    models: tuple[Any, ...]
    """The fitted ``HistGradientBoostingRegressor`` of each bucket."""
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
) -> RatioBooster:
    """Fit one booster per horizon bucket; rows whose target hour was gap-filled get weight 0.

    Positive weights other than 1 are passed to the booster as sample weights.

    Buckets that start beyond the longest horizon in ``features`` are left out.

    Raises:
        ValueError: when a bucket within the horizon range has no training row.
    """
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    params = dict(BOOSTER_PARAMS)
    if max_iter is not None:
        params["max_iter"] = max_iter
    horizon = features[:, HORIZON_COLUMN]
    used = tuple((lo, hi) for lo, hi in buckets if lo <= horizon.max())
    models = []
    for lo, hi in used:
        keep = (weight > 0) & (horizon >= lo) & (horizon <= hi)
        if not keep.any():
            raise ValueError(f"no training rows for horizons {lo}-{hi} h")
        model = HistGradientBoostingRegressor(random_state=seed, **params)
        # One OpenMP thread: on a shared, busy host the default (all cores) spin-waits and
        # runs ~10x slower; the backtest parallelises over regions instead, if at all.
        # Weights other than 0/1 (recency weighting) are sample weights; plain 0/1 masks fit
        # without them, exactly as before such weights existed.
        sample_weight = weight[keep]
        with threadpool_limits(limits=1):
            model.fit(
                features[keep],
                target[keep],
                sample_weight=None if np.all(sample_weight == 1.0) else sample_weight,
            )
        models.append(model)
    return RatioBooster(tuple(models), used)
