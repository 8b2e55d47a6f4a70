"""An online output-length model learned from completions only (no training data).

Prompts are grouped into log-spaced buckets of prompt length (one per octave by default);
each bucket keeps a streaming histogram of output lengths on log-spaced bins, and predicts
a quantile of it (the median by default, which minimises the absolute error). A bucket with
fewer than ``min_samples`` completions borrows the global histogram; with no completions at
all the model returns ``default_tokens``. Memory is bounded (a few hundred floats per bucket)
and each call is O(bins). Optional exponential forgetting (``half_life`` in completions)
lets it follow a drifting workload.

This is our own design, not a seed's: the seeds predict from prompt text (DynamoLLM §1.2,
μ-Serve §3, FREESH §2.6). It is the predictor a trace with only token counts allows.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import MutableMapping

    from shared.domain.classes import ClassScheme

__all__ = ["LogHistogram", "QuantilePredictor"]

_RESCALE_ABOVE: Final = 1e150
"""Forgetting grows the increment geometrically; rescale every weight before it overflows."""


@dataclass(slots=True)
class LogHistogram:
    """A weighted histogram of non-negative token counts on log2-spaced bins.

    Bin 0 holds 0; bin ``k ≥ 1`` holds ``[2^((k−1)/b), 2^(k/b))`` with ``b = bins_per_octave``,
    so quantiles are exact to within a factor ``2^(1/b)`` (≈ 9 % at b = 8), and exact for a
    bin that holds one distinct length.
    """

    bins_per_octave: int = 8
    """Resolution: bins per doubling of the length."""
    max_tokens: int = 1 << 17
    """Lengths above this share the last bin."""
    decay: float = 1.0
    """Weight kept by older samples per new sample (1.0 = never forget)."""
    count: int = 0
    """Number of samples added (unweighted)."""
    _weights: list[float] = field(init=False, repr=False)
    _lowest: list[int] = field(init=False, repr=False)
    _highest: list[int] = field(init=False, repr=False)
    _total: float = field(default=0.0, init=False, repr=False)
    _increment: float = field(default=1.0, init=False, repr=False)

    def __post_init__(self) -> None:
        """Validate settings and allocate the bins."""
        if self.bins_per_octave < 1:
            raise ValueError(f"bins_per_octave must be ≥ 1, got {self.bins_per_octave}")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")
        bins = self._bin(self.max_tokens) + 1
        self._weights = [0.0] * bins
        # The smallest and largest length seen in each bin tighten interpolation, so that a
        # constant stream yields its exact value instead of a point inside the bin.
        self._lowest = [self.max_tokens] * bins
        self._highest = [0] * bins

    def _bin(self, tokens: int) -> int:
        if tokens < 1:
            return 0
        return 1 + math.floor(math.log2(min(tokens, self.max_tokens)) * self.bins_per_octave)

    def add(self, tokens: int) -> None:
        """Add one observed length.

        Raises:
            ValueError: for a negative length.
        """
        if tokens < 0:
            raise ValueError(f"token count must be ≥ 0, got {tokens}")
        if self.decay < 1.0:
            # Growing the new sample's weight is the same as shrinking every old one.
            self._increment /= self.decay
            if self._increment > _RESCALE_ABOVE:
                self._weights = [w / self._increment for w in self._weights]
                self._total /= self._increment
                self._increment = 1.0
        index = self._bin(tokens)
        self._weights[index] += self._increment
        self._lowest[index] = min(self._lowest[index], tokens)
        self._highest[index] = max(self._highest[index], tokens)
        self._total += self._increment
        self.count += 1

    def quantile(self, q: float) -> float:
        """Return the ``q`` quantile, interpolated inside its bin between the lengths seen there.

        Raises:
            ValueError: when empty or ``q`` is outside [0, 1].
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        if self.count == 0:
            raise ValueError("quantile of an empty histogram")
        target = q * self._total
        cumulative = 0.0
        for index, weight in enumerate(self._weights):
            if weight > 0.0 and cumulative + weight >= target:
                fraction = (target - cumulative) / weight
                low, high = self._lowest[index], self._highest[index]
                return float(low + (high - low) * fraction)
            cumulative += weight
        return float(self.max_tokens)

    def fraction_below(self, tokens: int) -> float:
        """Return the weighted share of samples below ``tokens``.

        Exact unless ``tokens`` falls strictly between the smallest and largest length seen in
        its bin; then that bin's weight is split linearly between them.
        """
        if self._total == 0.0:
            return 0.0
        index = self._bin(tokens)
        below = sum(self._weights[:index])
        weight, low, high = self._weights[index], self._lowest[index], self._highest[index]
        if weight > 0.0 and tokens > low:
            below += weight if tokens > high else weight * (tokens - low) / (high - low + 1)
        return below / self._total


@dataclass(slots=True)
class QuantilePredictor:
    """Per-prompt-bucket streaming quantile of output length (see the module docstring)."""

    quantile: float = 0.5
    """Which quantile to predict (0.5 minimises mean absolute error)."""
    min_samples: int = 32
    """Completions a prompt bucket needs before it stops borrowing the global histogram."""
    buckets_per_octave: float = 1.0
    """Prompt-length buckets per doubling; 0 means one bucket (a global-only baseline)."""
    half_life: float = 0.0
    """Forgetting half-life in completions; 0 disables forgetting."""
    default_tokens: int = 128
    """Prediction before any completion is seen."""
    histogram_bins_per_octave: int = 8
    """Resolution of each output-length histogram."""
    name: str = "quantile"
    _global: LogHistogram = field(init=False, repr=False)
    _buckets: MutableMapping[int, LogHistogram] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        """Validate settings and create the global histogram."""
        if not 0.0 < self.quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {self.quantile}")
        if self.min_samples < 1 or self.default_tokens < 1 or self.buckets_per_octave < 0:
            raise ValueError("min_samples, default_tokens must be ≥ 1; buckets_per_octave ≥ 0")
        if self.half_life < 0:
            raise ValueError(f"half_life must be ≥ 0, got {self.half_life}")
        self._global = self._new_histogram()
        self._buckets = {}

    @classmethod
    def from_params(cls, params: dict[str, float]) -> QuantilePredictor:
        """Build from numeric settings, consuming the ones it knows from ``params``."""
        known = {
            "quantile": float,
            "min_samples": int,
            "buckets_per_octave": float,
            "half_life": float,
            "default_tokens": int,
            "histogram_bins_per_octave": int,
        }
        settings: dict[str, float] = {}
        for key, kind in known.items():
            if key in params:
                value = params.pop(key)
                if kind is int and value != int(value):
                    raise ValueError(f"{key} must be a whole number, got {value}")
                settings[key] = kind(value)
        return cls(**settings)  # type: ignore[arg-type]

    def _new_histogram(self) -> LogHistogram:
        decay = 0.5 ** (1.0 / self.half_life) if self.half_life > 0 else 1.0
        return LogHistogram(bins_per_octave=self.histogram_bins_per_octave, decay=decay)

    def prompt_bucket(self, prompt_tokens: int) -> int:
        """Return the log-spaced prompt bucket of a prompt length (0 for an empty prompt)."""
        if prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be ≥ 0, got {prompt_tokens}")
        if self.buckets_per_octave == 0 or prompt_tokens < 1:
            return 0
        return 1 + math.floor(math.log2(prompt_tokens) * self.buckets_per_octave)

    def _histogram_for(self, prompt_tokens: int) -> LogHistogram | None:
        bucket = self._buckets.get(self.prompt_bucket(prompt_tokens))
        if bucket is not None and bucket.count >= self.min_samples:
            return bucket
        return self._global if self._global.count > 0 else None

    def is_warm(self, prompt_tokens: int) -> bool:
        """Return whether this prompt's own bucket has enough completions."""
        bucket = self._buckets.get(self.prompt_bucket(prompt_tokens))
        return bucket is not None and bucket.count >= self.min_samples

    def predict(
        self, prompt_tokens: int, *, true_output_tokens: int | None = None, text: str | None = None
    ) -> int:
        """Return the learned quantile of output length for this prompt length (≥ 1).

        ``true_output_tokens`` and ``text`` are ignored: the model uses the length only.
        """
        histogram = self._histogram_for(prompt_tokens)
        if histogram is None:
            return self.default_tokens
        return max(1, round(histogram.quantile(self.quantile)))

    def output_class_shares(self, prompt_tokens: int, scheme: ClassScheme) -> tuple[float, ...]:
        """Return the learned probability of each output bucket of ``scheme`` for this prompt."""
        histogram = self._histogram_for(prompt_tokens)
        if histogram is None:
            buckets = len(scheme.output_edges) + 1
            return tuple(1.0 / buckets for _ in range(buckets))
        below = [histogram.fraction_below(edge) for edge in scheme.output_edges]
        bounds = [0.0, *below, 1.0]
        return tuple(max(0.0, hi - lo) for lo, hi in itertools.pairwise(bounds))

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        """Learn one completion into its prompt bucket and the global histogram."""
        key = self.prompt_bucket(prompt_tokens)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = self._new_histogram()
        bucket.add(output_tokens)
        self._global.add(output_tokens)
