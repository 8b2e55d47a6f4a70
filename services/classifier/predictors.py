"""Output-length predictors behind :class:`~shared.domain.classes.OutputLengthPredictor`.

- ``oracle``: the true length (an upper bound on any predictor; trace replay only).
- ``oracle-noisy``: the true length with seeded Gaussian relative noise whose p95 |error| is
  the setting (throttLL'eM §1.5: r̂ = max(1, round(r·(1+ε))), ε ~ N(0, (e_p95/1.96)²)).
- ``class-accuracy``: right output class with a set probability, a wrong one otherwise
  (DynamoLLM §1.2, Fig. 12: 100/81/60 % accuracy).
- ``quantile``: an online model learned only from completions, see
  :mod:`services.classifier.quantile_model`.
- ``proxy``: a text encoder plus a trained head, see :mod:`services.classifier.proxy_model`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from services.classifier.quantile_model import QuantilePredictor
from shared.domain.classes import ClassScheme, OutputLengthPredictor, dynamollm_scheme

__all__ = [
    "NORMAL_P95_Z",
    "ClassAccuracyPredictor",
    "NoisyOraclePredictor",
    "OraclePredictor",
    "build_predictor",
    "make_predictor",
]

NORMAL_P95_Z: Final = 1.959963984540054
"""z with P(|Z| ≤ z) = 0.95 for a standard normal Z; σ = e_p95 / z gives p95 |ε| = e_p95."""


def _require_truth(name: str, true_output_tokens: int | None) -> int:
    if true_output_tokens is None:
        raise ValueError(f"predictor {name!r} needs true_output_tokens (trace replay only)")
    if true_output_tokens < 0:
        raise ValueError(f"true_output_tokens must be ≥ 0, got {true_output_tokens}")
    return true_output_tokens


@dataclass(slots=True)
class OraclePredictor:
    """Returns the true output length (at least one token)."""

    name: str = "oracle"

    def predict(
        self, prompt_tokens: int, *, true_output_tokens: int | None = None, text: str | None = None
    ) -> int:
        """Return ``max(1, true_output_tokens)``.

        Raises:
            ValueError: when the true length is not given.
        """
        return max(1, _require_truth(self.name, true_output_tokens))

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        """Ignore feedback: the oracle needs none."""


@dataclass(slots=True)
class NoisyOraclePredictor:
    """The true length with relative Gaussian noise sized by its p95 (throttLL'eM §1.5).

    ε ~ N(0, σ²) with σ = p95_error / 1.96, so ``P(|ε| ≤ p95_error) = 0.95`` before rounding;
    the prediction is ``max(1, round(true·(1+ε)))``. Seeded, so runs repeat.
    """

    p95_error: float = 0.15
    """p95 of the relative error |r̂ − r| / r, e.g. 0.15 for 15 %."""
    seed: int = 0
    """Seed of the noise stream."""
    name: str = "oracle-noisy"
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        """Validate the error level and seed the noise stream."""
        if not 0.0 <= self.p95_error < 1.0:
            raise ValueError(f"p95_error must be in [0, 1), got {self.p95_error}")
        self._rng = random.Random(self.seed)

    @property
    def sigma(self) -> float:
        """Standard deviation of the relative noise ε."""
        return self.p95_error / NORMAL_P95_Z

    def predict(
        self, prompt_tokens: int, *, true_output_tokens: int | None = None, text: str | None = None
    ) -> int:
        """Return the noisy true length.

        Raises:
            ValueError: when the true length is not given.
        """
        truth = _require_truth(self.name, true_output_tokens)
        if self.p95_error == 0.0:
            return max(1, truth)
        epsilon = self._rng.gauss(0.0, self.sigma)
        return max(1, round(truth * (1.0 + epsilon)))

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        """Ignore feedback: the noise model is fixed."""


def representative_length(scheme: ClassScheme, bucket: int) -> int:
    """Return a length inside an output bucket: its midpoint, or twice its floor when open-ended."""
    low, high = scheme.output_range(bucket)
    if high is None:
        return max(1, 2 * low)
    return max(1, (low + high - 1) // 2)


@dataclass(slots=True)
class ClassAccuracyPredictor:
    """Right output class with probability ``accuracy`` (DynamoLLM §1.2, Fig. 12).

    When right, it returns the true length; when wrong, a representative length of an output
    bucket drawn uniformly from the other buckets (the paper does not say how its injected
    errors are spread; uniform is the least informed choice).
    """

    scheme: ClassScheme
    """Classes whose output buckets define "right"."""
    accuracy: float = 0.81
    """Probability of the right output class (DynamoLLM's proxy: 0.81)."""
    seed: int = 0
    """Seed of the error stream."""
    name: str = "class-accuracy"
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        """Validate the accuracy and seed the error stream."""
        if not 0.0 <= self.accuracy <= 1.0:
            raise ValueError(f"accuracy must be in [0, 1], got {self.accuracy}")
        self._rng = random.Random(self.seed)

    def predict(
        self, prompt_tokens: int, *, true_output_tokens: int | None = None, text: str | None = None
    ) -> int:
        """Return the true length, or with probability 1 − accuracy a wrong class's length.

        Raises:
            ValueError: when the true length is not given.
        """
        truth = _require_truth(self.name, true_output_tokens)
        if self._rng.random() < self.accuracy:
            return max(1, truth)
        right = self.scheme.output_bucket(truth)
        wrong = [b for b in range(len(self.scheme.output_edges) + 1) if b != right]
        return representative_length(self.scheme, self._rng.choice(wrong))

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        """Ignore feedback: the error rate is fixed."""


def _as_int(value: float, what: str) -> int:
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f"{what} must be a whole number, got {value}")
    return int(value)


def build_predictor(
    name: str, *, scheme: ClassScheme, model_dir: Path | None = None, **params: float
) -> OutputLengthPredictor:
    """Build a predictor by name for ``scheme``; see :func:`make_predictor`.

    Raises:
        KeyError: for an unknown name.
        TypeError: for a setting the kind does not take.
    """
    seed = _as_int(params.pop("seed", 0), "seed")
    predictor: OutputLengthPredictor
    if name == "oracle":
        predictor = OraclePredictor()
    elif name == "oracle-noisy":
        predictor = NoisyOraclePredictor(p95_error=params.pop("p95_error", 0.15), seed=seed)
    elif name == "class-accuracy":
        accuracy = params.pop("accuracy", 0.81)
        predictor = ClassAccuracyPredictor(scheme=scheme, accuracy=accuracy, seed=seed)
    elif name == "quantile":
        predictor = QuantilePredictor.from_params(params)
        params.clear()
    elif name == "proxy":
        from services.classifier.proxy_model import load_proxy_predictor

        predictor = load_proxy_predictor(model_dir)
    else:
        raise KeyError(
            f"unknown predictor {name!r}; known: oracle, oracle-noisy, class-accuracy, "
            "quantile, proxy"
        )
    if params:
        raise TypeError(f"predictor {name!r} does not take {sorted(params)}")
    return predictor


def make_predictor(
    name: str,
    *,
    scheme: ClassScheme | None = None,
    model_dir: Path | None = None,
    **params: float,
) -> OutputLengthPredictor:
    """Build a predictor by name: ``oracle``, ``oracle-noisy``, ``class-accuracy``, ``quantile``,
    ``proxy``.

    Args:
        name: the predictor kind.
        scheme: classes for ``class-accuracy`` (default: DynamoLLM's nine).
        model_dir: folder of the ``proxy`` model (encoder files plus ``head.npz``).
        **params: numeric settings of that kind, e.g. ``p95_error=0.15, seed=1``.

    Raises:
        KeyError: for an unknown name.
        TypeError: for a setting the kind does not take.
    """
    return build_predictor(name, scheme=scheme or dynamollm_scheme(), model_dir=model_dir, **params)
