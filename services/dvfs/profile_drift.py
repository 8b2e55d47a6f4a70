"""Has the served length mix moved away from the one a profile was swept with?

DynamoLLM (seed 001 §3.1) profiles each request class once, before deployment; the live agent
learns its lengths from completions instead (:mod:`services.dvfs.profile_live`), so when the
mix a worker serves changes (a chat workload gives way to long-prompt code or summarisation),
the profile it chose clocks by describes requests it no longer serves. This module decides
when to sweep again: a two-sample Kolmogorov–Smirnov test of the lengths the profile was swept
with against a window of recent completions, prompts and outputs separately. Windows do not
overlap (the caller tests once per ``window`` new completions), so the false-alarm rate is the
test's own: ``2·alpha`` per window.

A window that detects a change usually straddles it, and a profile swept with the whole
window would describe a mixture of the old and the new mix. :func:`change_point` locates
the change inside the window (one step of binary segmentation with the same test), so the
re-sweep can use only the completions after it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

__all__ = [
    "DRIFT_ALPHA",
    "MIN_SEGMENT",
    "ChangePoint",
    "LengthDrift",
    "change_point",
    "ks_critical",
    "ks_statistic",
    "length_drift",
]

DRIFT_ALPHA: Final = 0.001
"""Significance of each of the two tests: at 10 req/s and 256-completion windows, one
needless re-sweep (0.4–2 s of CPU in a thread, an equivalent profile) every ~3.5 h."""
MIN_SEGMENT: Final = 32
"""Fewest completions on either side of a change point: below that the KS test cannot tell
a change of mix from chance at any useful level (critical statistic > 0.5 at 32 vs 224)."""


def ks_statistic(a: Sequence[int], b: Sequence[int]) -> float:
    """The largest gap between the two samples' empirical CDFs (ties handled exactly)."""
    if not a or not b:
        raise ValueError("both samples must be non-empty")
    xs, ys = np.sort(np.asarray(a)), np.sort(np.asarray(b))
    points = np.concatenate([xs, ys])
    cdf_a = np.searchsorted(xs, points, side="right") / len(xs)
    cdf_b = np.searchsorted(ys, points, side="right") / len(ys)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def ks_critical(n: int, m: int, alpha: float = DRIFT_ALPHA) -> float:
    """The asymptotic critical value of the two-sample statistic at level ``alpha``."""
    if n < 1 or m < 1 or not 0.0 < alpha < 1.0:
        raise ValueError("need n, m >= 1 and 0 < alpha < 1")
    return math.sqrt(-math.log(alpha / 2.0) / 2.0) * math.sqrt((n + m) / (n * m))


@dataclass(frozen=True, slots=True)
class LengthDrift:
    """The two tests' statistics against their critical values."""

    prompt_d: float
    output_d: float
    critical: float

    @property
    def drifted(self) -> bool:
        """Whether either the prompt or the output lengths moved."""
        return max(self.prompt_d, self.output_d) > self.critical


def length_drift(
    swept: tuple[Sequence[int], Sequence[int]],
    recent: tuple[Sequence[int], Sequence[int]],
    alpha: float = DRIFT_ALPHA,
) -> LengthDrift:
    """Test (prompts, outputs) the profile was swept with against recent ones."""
    (swept_prompts, swept_outputs), (recent_prompts, recent_outputs) = swept, recent
    return LengthDrift(
        prompt_d=ks_statistic(swept_prompts, recent_prompts),
        output_d=ks_statistic(swept_outputs, recent_outputs),
        critical=ks_critical(len(swept_prompts), len(recent_prompts), alpha),
    )


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """The most likely split of a window into an older and a newer mix."""

    index: int
    """Position of the first completion of the newer mix."""
    statistic: float
    """The KS statistic between the two sides (the larger of prompts' and outputs')."""
    critical: float
    """Its critical value for the two sides' sizes."""

    @property
    def significant(self) -> bool:
        """Whether the two sides differ at the test's level."""
        return self.statistic > self.critical


def change_point(
    prompts: Sequence[int],
    outputs: Sequence[int],
    *,
    min_segment: int = MIN_SEGMENT,
    alpha: float = DRIFT_ALPHA,
) -> ChangePoint | None:
    """Where in a window of completions (in the order they ended) the length mix changed.

    Every split leaving ``min_segment`` completions on each side is scored by the two-sample
    KS statistic between its sides, standardised by ``sqrt(k (n - k) / n)`` so that splits
    near the ends, whose statistic is noisier, do not win by chance; prompts and outputs are
    scored separately and the larger counts. None when the window is too short to split.
    The significance is the chosen split's own test, which a search over splits makes
    optimistic; a false split only narrows the re-sweep's sample to newer completions.
    """
    n = len(prompts)
    if n != len(outputs):
        raise ValueError("prompts and outputs must be of the same completions")
    if n < 2 * max(1, min_segment):
        return None
    best: tuple[float, int, float] | None = None
    for k in range(max(1, min_segment), n - max(1, min_segment) + 1):
        d = max(ks_statistic(prompts[:k], prompts[k:]), ks_statistic(outputs[:k], outputs[k:]))
        score = d * math.sqrt(k * (n - k) / n)
        if best is None or score > best[0]:
            best = (score, k, d)
    assert best is not None
    _, index, statistic = best
    return ChangePoint(index, statistic, ks_critical(index, n - index, alpha))
