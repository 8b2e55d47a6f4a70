"""Tests of the oracle-based predictors, the factory and the optional proxy model."""

from __future__ import annotations

import numpy as np
import pytest

from services.classifier.predictors import (
    NoisyOraclePredictor,
    make_predictor,
    representative_length,
)
from services.classifier.proxy_model import (
    ProxyModelPredictor,
    ProxyModelUnavailableError,
    fit_head,
)
from shared.domain.classes import dynamollm_scheme


def _p95_relative_error(p95_error: float, *, seed: int, draws: int = 20_000) -> float:
    predictor = make_predictor("oracle-noisy", p95_error=p95_error, seed=seed)
    truth = 10_000  # large, so rounding to whole tokens does not blur the noise
    errors = sorted(
        abs(predictor.predict(50, true_output_tokens=truth) - truth) / truth for _ in range(draws)
    )
    return errors[int(0.95 * draws)]


@pytest.mark.parametrize("p95_error", [0.0, 0.15, 0.30])
def test_noisy_oracle_p95_error_matches_the_setting(p95_error: float) -> None:
    """Test that the measured p95 relative error is the setting within 0.01."""
    assert _p95_relative_error(p95_error, seed=3) == pytest.approx(p95_error, abs=0.01)


def test_noisy_oracle_repeats_with_its_seed_and_differs_across_seeds() -> None:
    """Test that equal seeds give equal streams and different seeds different ones."""

    def stream(seed: int) -> list[int]:
        predictor = NoisyOraclePredictor(p95_error=0.3, seed=seed)
        return [predictor.predict(10, true_output_tokens=500) for _ in range(50)]

    assert stream(7) == stream(7)
    assert stream(7) != stream(8)


def test_noisy_oracle_never_predicts_less_than_one_token() -> None:
    """Test that a tiny true length with large noise still yields at least one token."""
    predictor = NoisyOraclePredictor(p95_error=0.99, seed=1)
    assert min(predictor.predict(1, true_output_tokens=0) for _ in range(200)) >= 1


@pytest.mark.parametrize("accuracy", [1.0, 0.81, 0.60])
def test_class_accuracy_injection_hits_the_set_accuracy(accuracy: float) -> None:
    """Test that the share of right DynamoLLM output classes is the setting within 0.015."""
    scheme = dynamollm_scheme()
    predictor = make_predictor("class-accuracy", scheme=scheme, accuracy=accuracy, seed=5)
    truths = [30, 200, 900] * 4000
    right = sum(
        scheme.output_bucket(predictor.predict(10, true_output_tokens=t)) == scheme.output_bucket(t)
        for t in truths
    )
    assert right / len(truths) == pytest.approx(accuracy, abs=0.015)


def test_representative_lengths_lie_inside_their_buckets() -> None:
    """Test that each bucket's stand-in length is classified into that bucket."""
    scheme = dynamollm_scheme()
    for bucket in range(3):
        assert scheme.output_bucket(representative_length(scheme, bucket)) == bucket


def test_oracles_need_the_true_length() -> None:
    """Test that oracle modes refuse to guess without the trace's true length."""
    for name in ("oracle", "oracle-noisy", "class-accuracy"):
        with pytest.raises(ValueError, match="true_output_tokens"):
            make_predictor(name).predict(100)


def test_factory_refuses_unknown_names_and_settings() -> None:
    """Test that a typo in a name or setting is an error, not a silent default."""
    with pytest.raises(KeyError, match="unknown predictor"):
        make_predictor("orcale")
    with pytest.raises(TypeError, match="p95_eror"):
        make_predictor("oracle-noisy", p95_eror=0.1)
    with pytest.raises(ValueError, match="p95_error"):
        make_predictor("oracle-noisy", p95_error=1.5)
    with pytest.raises(ValueError, match="whole number"):
        make_predictor("quantile", min_samples=2.5)


def test_proxy_predictor_explains_what_is_missing() -> None:
    """Test that the proxy predictor raises a clear error without its extra or a trained head."""
    with pytest.raises(ProxyModelUnavailableError, match="proxy"):
        make_predictor("proxy")


def test_fitted_head_recovers_a_log_linear_relation() -> None:
    """Test that the closed-form head learns log1p(tokens) = 2·x0 + 4 from embeddings."""
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(400, 8))
    tokens = np.expm1(2.0 * embeddings[:, 0] + 4.0)
    head = fit_head(embeddings, tokens, ridge=1e-6)
    predictor = ProxyModelPredictor(embed=lambda _text: np.array([0.5] + [0.0] * 7), head=head)
    assert predictor.predict(10, text="any prompt") == round(float(np.expm1(5.0)))


def test_proxy_predictor_falls_back_to_lengths_without_text() -> None:
    """Test that requests without text use the online fallback, which observe() teaches."""
    head = fit_head(np.eye(2), np.array([10.0, 10.0]))
    predictor = ProxyModelPredictor(embed=lambda _text: np.zeros(2), head=head)
    for _ in range(40):
        predictor.observe(100, 77)
    assert predictor.predict(100) == 77
