"""Gradient-boosted model of the log-ratio between the actual intensity and the 7-day template.

Learning the ratio to the template (rather than the level) keeps one model valid across
seasons and makes its error scale-free, which is what MAPE scores. The rows come from
:func:`services.forecaster.features.gbm_features`; scikit-learn's
``HistGradientBoostingRegressor`` with absolute-error loss fits the median log-ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = ["BOOSTER_PARAMS", "RatioBooster", "fit_ratio_booster"]

FloatArray = npt.NDArray[np.float64]

BOOSTER_PARAMS: Final[dict[str, Any]] = {
    "loss": "squared_error",
    "learning_rate": 0.05,
    "max_iter": 300,
    "max_leaf_nodes": 31,
    "min_samples_leaf": 100,
    "l2_regularization": 1.0,
    # Early stopping would draw a random (time-shuffled) validation split; the chooser
    # validates on a later time span instead.
    "early_stopping": False,
}
"""Hyper-parameters, fixed a priori (not searched on the test years); ``max_iter`` may be
overridden (tests use fewer rounds)."""


@dataclass(frozen=True, slots=True)
class RatioBooster:
    """A fitted booster; ``predict`` returns the log-ratio to the template per row."""

    model: Any
    """The fitted ``HistGradientBoostingRegressor``."""

    def predict(self, features: FloatArray) -> FloatArray:
        """Predict the log-ratio for each row of ``features``."""
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

        with threadpool_limits(limits=1):
            result: FloatArray = np.asarray(self.model.predict(features), dtype=np.float64)
        return result


def fit_ratio_booster(
    features: FloatArray,
    target: FloatArray,
    weight: FloatArray,
    seed: int = 0,
    max_iter: int | None = None,
) -> RatioBooster:
    """Fit the booster; rows whose target hour was gap-filled get weight 0."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    keep = weight > 0
    params = dict(BOOSTER_PARAMS)
    if max_iter is not None:
        params["max_iter"] = max_iter
    model = HistGradientBoostingRegressor(random_state=seed, **params)
    # One OpenMP thread: on a shared, busy host the default (all cores) spin-waits and runs
    # ~10x slower; the backtest parallelises over regions instead, if at all.
    with threadpool_limits(limits=1):
        model.fit(features[keep], target[keep])
    return RatioBooster(model)
