"""Tests of the online per-prompt-bucket quantile model."""

from __future__ import annotations

import math
import random

import pytest

from services.classifier.predictors import make_predictor
from services.classifier.quantile_model import LogHistogram, QuantilePredictor
from shared.domain.classes import dynamollm_scheme


def test_quantile_model_converges_to_each_prompt_buckets_median() -> None:
    """Test that two prompt-length groups with different lognormal outputs get their medians."""
    rng = random.Random(11)
    model = QuantilePredictor()
    for _ in range(4000):
        model.observe(60, round(rng.lognormvariate(math.log(40), 0.6)))
        model.observe(2000, round(rng.lognormvariate(math.log(400), 0.6)))
    assert model.predict(60) == pytest.approx(40, rel=0.06)
    assert model.predict(2000) == pytest.approx(400, rel=0.06)


def test_quantile_model_falls_back_to_global_until_a_bucket_is_warm() -> None:
    """Test that a cold model gives its default, then the global estimate, then the bucket's."""
    model = QuantilePredictor(min_samples=10, default_tokens=128)
    assert model.predict(1000) == 128
    for _ in range(50):
        model.observe(10, 20)
    assert not model.is_warm(1000)
    assert model.predict(1000) == 20
    for _ in range(10):
        model.observe(1000, 900)
    assert model.is_warm(1000)
    assert model.predict(1000) == 900


def test_quantile_model_with_forgetting_follows_a_shift() -> None:
    """Test that a half-life lets the estimate move to a new regime that a plain model lags."""
    forgetful = QuantilePredictor(half_life=100)
    steady = QuantilePredictor()
    for length in [50] * 2000 + [500] * 400:
        forgetful.observe(100, length)
        steady.observe(100, length)
    assert forgetful.predict(100) == 500
    assert steady.predict(100) == 50


def test_higher_quantiles_predict_longer() -> None:
    """Test that the p90 setting predicts the p90 of a uniform stream."""
    model = QuantilePredictor(quantile=0.9)
    for length in range(1, 1001):
        model.observe(100, length)
    assert model.predict(100) == pytest.approx(900, rel=0.05)


def test_output_class_shares_match_the_stream() -> None:
    """Test that the learned DynamoLLM S/M/L shares are those of the observed lengths."""
    model = QuantilePredictor()
    for length in [10] * 60 + [200] * 30 + [800] * 10:
        model.observe(100, length)
    shares = model.output_class_shares(100, dynamollm_scheme())
    assert shares == pytest.approx((0.6, 0.3, 0.1))


def test_histogram_refuses_bad_input() -> None:
    """Test that negative lengths, empty quantiles and bad settings raise ValueError."""
    histogram = LogHistogram()
    with pytest.raises(ValueError, match="empty"):
        histogram.quantile(0.5)
    with pytest.raises(ValueError, match="≥ 0"):
        histogram.add(-3)
    with pytest.raises(ValueError, match="quantile"):
        QuantilePredictor(quantile=1.0)


def test_factory_passes_quantile_settings() -> None:
    """Test that make_predictor('quantile', ...) applies its numeric settings."""
    model = make_predictor("quantile", min_samples=5, buckets_per_octave=0, default_tokens=9)
    assert isinstance(model, QuantilePredictor)
    assert (model.min_samples, model.buckets_per_octave, model.default_tokens) == (5, 0.0, 9)
    assert model.prompt_bucket(5000) == model.prompt_bucket(1) == 0
