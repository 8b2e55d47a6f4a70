"""Unit tests of the per-horizon-bucket ratio booster."""

from __future__ import annotations

import numpy as np
import pytest

from services.forecaster.features import HORIZON_COLUMN
from services.forecaster.gbm import fit_ratio_booster

BUCKETS = ((1, 6), (7, 24), (25, 48))


def _rows(horizon_max: int = 48) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    horizon = np.tile(np.arange(1, horizon_max + 1, dtype=np.float64), 200)
    signal = rng.normal(size=horizon.size)
    features = np.zeros((horizon.size, 2))
    features[:, HORIZON_COLUMN] = horizon
    features[:, 1] = signal
    # Each bucket has its own slope on the signal: a model per bucket can learn all three.
    slope = np.select([horizon <= 6, horizon <= 24], [1.0, -1.0], 0.0)
    return features, slope * signal


def test_each_bucket_has_its_own_model_and_rows_are_routed_by_horizon() -> None:
    """Test that predictions follow each bucket's own relation to the features."""
    features, target = _rows()
    booster = fit_ratio_booster(features, target, np.ones(len(target)), max_iter=60)
    assert booster.buckets == BUCKETS
    assert len(booster.models) == 3
    probe = np.array([[3.0, 1.0], [12.0, 1.0], [40.0, 1.0]])
    predicted = booster.predict(probe)
    assert predicted[0] > 0.5
    assert predicted[1] < -0.5
    assert abs(predicted[2]) < 0.2


def test_buckets_beyond_the_longest_horizon_are_left_out() -> None:
    """Test that a 24-h fit has no day-2 model, and a gap-only bucket is refused."""
    features, target = _rows(24)
    booster = fit_ratio_booster(features, target, np.ones(len(target)), max_iter=10)
    assert booster.buckets == BUCKETS[:2]
    weight = np.where(features[:, HORIZON_COLUMN] <= 6, 0.0, 1.0)
    with pytest.raises(ValueError, match="no training rows for horizons 1-6"):
        fit_ratio_booster(features, target, weight, max_iter=10)
