"""Unit tests of the per-horizon-bucket ratio booster."""

from __future__ import annotations

import numpy as np
import pytest

from services.forecaster.features import HORIZON_COLUMN
from services.forecaster.gbm import (
    BAG_MAX_FEATURES,
    BOOSTER_PARAMS,
    BoosterBag,
    fit_ratio_booster,
)

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


def _noisy_rows() -> tuple[np.ndarray, np.ndarray]:
    """Rows with five informative features, so feature subsampling changes the trees."""
    rng = np.random.default_rng(1)
    horizon = np.tile(np.arange(1, 49, dtype=np.float64), 60)
    features = np.column_stack([horizon, rng.normal(size=(horizon.size, 5))])
    features[:, HORIZON_COLUMN] = horizon
    target = features[:, 1:] @ np.array([1.0, 0.5, -0.7, 0.3, 0.2])
    return features, target + rng.normal(0.0, 0.3, horizon.size)


def test_a_bag_of_one_is_the_single_booster() -> None:
    """Test that ``bag=1`` fits exactly the booster of before: one plain model per bucket, all
    features, seed 0, the same predictions bit for bit."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    features, target = _noisy_rows()
    booster = fit_ratio_booster(features, target, np.ones(len(target)), max_iter=30, bag=1)
    horizon = features[:, HORIZON_COLUMN]
    for (lo, hi), model in zip(booster.buckets, booster.models, strict=True):
        assert isinstance(model, HistGradientBoostingRegressor)
        rows = (horizon >= lo) & (horizon <= hi)
        reference = HistGradientBoostingRegressor(
            random_state=0, **{**BOOSTER_PARAMS, "max_iter": 30}
        ).fit(features[rows], target[rows])
        np.testing.assert_array_equal(model.predict(features), reference.predict(features))


def test_a_bag_averages_boosters_with_their_own_seeds_and_feature_draws() -> None:
    """Test that ``bag=3`` gives every bucket three different boosters (seeds 0, 1, 2, a
    random share of the features at each split) and predicts their mean log-ratio."""
    features, target = _noisy_rows()
    single = fit_ratio_booster(features, target, np.ones(len(target)), max_iter=30)
    bagged = fit_ratio_booster(features, target, np.ones(len(target)), max_iter=30, bag=3)
    assert bagged.buckets == single.buckets
    probe = features[:500]
    for model in bagged.models:
        assert isinstance(model, BoosterBag)
        assert [m.random_state for m in model.members] == [0, 1, 2]
        assert all(m.max_features == BAG_MAX_FEATURES for m in model.members)
        each = [m.predict(probe) for m in model.members]
        assert not np.array_equal(each[0], each[1])
        np.testing.assert_allclose(model.predict(probe), np.mean(each, axis=0))
    assert not np.array_equal(bagged.predict(probe), single.predict(probe))
    with pytest.raises(ValueError, match="bag must be at least 1"):
        fit_ratio_booster(features, target, np.ones(len(target)), max_iter=5, bag=0)
