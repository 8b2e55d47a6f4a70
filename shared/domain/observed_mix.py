"""The request sizes the planner has seen, and when its profiles no longer describe them.

The planner's capacity model (per-class profile rows, FREESH Eq. 6, and the mixed-class
scaling of :mod:`services.planner.mixed_profiles`) is measured on request lengths. Measured
on one trace's lengths, it overstates what a pool serves when the traffic is another mix:
on the ``code`` trace (long prompts, ≈ 2,000 tokens in the long-input classes where ``conv``
has ≈ 1,100) the planner's long-input pools met 54–72 % of SLOs against the 99 % they
were sized for (docs/simulator.md, "Observed sizes"). :class:`ObservedMix` keeps a bounded
sample of the (prompt, output) lengths of completed requests (the planner's demand signal,
``request.done``) and says when it has drifted from the lengths the profiles were measured
on, so the planner re-profiles on what it serves rather than on what it expected.

Pure: no I/O; the live planner and the simulator feed it completions and call
:meth:`ObservedMix.drifted` before an epoch's solve.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Final

from shared.domain.classes import ClassScheme

__all__ = ["DRIFT_SIGNIFICANCE", "ObservedMix", "ObservedMixSettings", "profile_lengths"]

Lengths = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedMixSettings:
    """How much is kept and what counts as drift (``PlannerSettings.observed_*``)."""

    sample: int = 2000
    """Completions kept (the most recent): at ≈ 3 req/s, the last ≈ 10 minutes."""
    min_requests: int = 300
    """Completions needed before the sample is trusted (a class at 5 % share has ≈ 15)."""
    share_shift: float = 0.10
    """Re-profile when the class shares move by more than this total-variation distance."""
    size_shift: float = 0.25
    """...or when a class holding ``min_class_share`` of requests changes its mean prompt or
    output length by more than this share (a 25 % longer prefill is ≈ 25 % more TTFT)."""
    min_class_share: float = 0.05
    min_bucket_samples: int = 20
    """An input or output bucket needs this many observed lengths to replace the reference
    lengths of that bucket in a profile (else the reference lengths stay; the default of
    :func:`profile_lengths` too)."""

    def __post_init__(self) -> None:
        if self.sample < 1 or self.min_requests < 1 or self.min_bucket_samples < 1:
            raise ValueError("sample, min_requests and min_bucket_samples must be >= 1")
        for name in ("share_shift", "size_shift", "min_class_share"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1]")


class ObservedMix:
    """A bounded sample of served request lengths, judged against a reference sample."""

    def __init__(self, scheme: ClassScheme, settings: ObservedMixSettings | None = None) -> None:
        """Keep lengths classified by ``scheme``."""
        self.scheme = scheme
        self.settings = settings or ObservedMixSettings()
        self._seen: deque[tuple[int, int]] = deque(maxlen=self.settings.sample)
        self._reference: tuple[Sequence[tuple[int, int]], dict[str, _ClassStat]] | None = None

    def add(self, prompt: int, output: int) -> None:
        """One completed request's prompt and output tokens (non-positive ones are ignored)."""
        if prompt >= 1 and output >= 1:
            self._seen.append((prompt, output))

    def __len__(self) -> int:
        return len(self._seen)

    @property
    def trusted(self) -> bool:
        """Whether ``min_requests`` are held (:meth:`sample` is not ``None``)."""
        return len(self._seen) >= self.settings.min_requests

    def sample(self) -> Lengths | None:
        """The kept lengths, oldest first; ``None`` until ``min_requests`` are held."""
        if len(self._seen) < self.settings.min_requests:
            return None
        return tuple(self._seen)

    def open_bucket_p99(self, quantum: int = 256) -> int | None:
        """The p99 prompt of the open-ended last input bucket, rounded up to ``quantum``
        tokens (so that a floor derived from it is recomputed only when it moves); ``None``
        without a trusted sample or with fewer than ``min_bucket_samples`` there."""
        seen = self.sample()
        if seen is None:
            return None
        last = len(self.scheme.input_edges)
        prompts = sorted(p for p, _ in seen if self.scheme.input_bucket(p) == last)
        if len(prompts) < self.settings.min_bucket_samples:
            return None
        p99 = prompts[min(len(prompts) - 1, int(0.99 * len(prompts)))]
        return -(-p99 // quantum) * quantum

    def drifted(self, reference: Sequence[tuple[int, int]]) -> bool:
        """Whether the sample has moved away from ``reference`` (the profiled lengths): a
        shift over the settings' thresholds that is also beyond sampling noise.

        Two samples of one traffic differ by chance: a class at 5-20 % of 2,000 completions
        holds 100-400 heavy-tailed lengths, whose mean can move by more than 25 % between two
        draws. On ``code`` such a move (MS output 17 → 22 tokens, 3.0 standard errors) made
        the planner re-profile and re-plan 43 minutes in, switching TP modes under load
        (docs/simulator.md, "Drift beyond noise"). So a shift counts only when a two-sample
        z-test also rejects "same traffic" at :data:`DRIFT_SIGNIFICANCE`,
        Bonferroni-corrected over the tests one look makes.
        """
        seen = self.sample()
        if seen is None or not reference:
            return False
        if self._reference is None or self._reference[0] is not reference:
            # The reference (the profiled lengths) changes only at a re-profile: keep its
            # statistics, which every look (each planner tick) compares with.
            self._reference = (reference, _stats(self.scheme, reference))
        ours, theirs = _stats(self.scheme, seen), self._reference[1]
        classes = sorted(set(ours) | set(theirs))
        judged = [c for c, stat in ours.items() if stat.share >= self.settings.min_class_share]
        z = NormalDist().inv_cdf(1.0 - DRIFT_SIGNIFICANCE / (2 * (len(classes) + 2 * len(judged))))
        n_ours, n_theirs = len(seen), len(reference)
        shifts = {c: ours.get(c, _EMPTY).share - theirs.get(c, _EMPTY).share for c in classes}
        noise = {
            c: _share_se(ours.get(c, _EMPTY).share, theirs.get(c, _EMPTY).share, n_ours, n_theirs)
            for c in classes
        }
        moved = _total_variation(ours, theirs, classes) > Fraction(self.settings.share_shift)
        if moved and any(abs(d) > z * noise[c] for c, d in shifts.items()):
            return True
        for cls in judged:
            stat, ref = ours[cls], theirs.get(cls)
            if ref is None:
                return True
            for mine, other in ((stat.prompt, ref.prompt), (stat.output, ref.output)):
                delta = abs(mine.mean - other.mean)
                spread = math.sqrt(mine.var / mine.n + other.var / other.n)
                if delta > self.settings.size_shift * other.mean and delta > z * spread:
                    return True
        return False


DRIFT_SIGNIFICANCE: Final = 0.01
"""The chance that one look at a sample of unchanged traffic calls it drifted (the level of
SLO feedback's test, ``services/planner/slo_feedback.py``)."""


def _total_variation(
    ours: dict[str, _ClassStat], theirs: dict[str, _ClassStat], classes: Iterable[str]
) -> Fraction:
    """Total-variation distance of two class mixes, exactly, from their counts.

    The shares are counts over sample sizes, so a distance of exactly the threshold is
    common (two 2,000-request samples whose mixes differ by 200 requests); a float sum would
    put it on either side of the threshold by the order it adds the classes in, which is
    the string-hash order of a set: the same run re-profiled at different times under
    different ``PYTHONHASHSEED`` values.
    """
    n_ours = sum(s.count for s in ours.values()) or 1
    n_theirs = sum(s.count for s in theirs.values()) or 1
    moved = sum(
        abs(ours.get(c, _EMPTY).count * n_theirs - theirs.get(c, _EMPTY).count * n_ours)
        for c in classes
    )
    return Fraction(moved, 2 * n_ours * n_theirs)


def _share_se(p: float, q: float, n: int, m: int) -> float:
    """Standard error of the difference of two class shares (independent samples)."""
    return math.sqrt(p * (1.0 - p) / max(n, 1) + q * (1.0 - q) / max(m, 1))


@dataclass(frozen=True, slots=True)
class _Moments:
    n: int
    mean: float
    var: float


@dataclass(frozen=True, slots=True)
class _ClassStat:
    count: int
    share: float
    prompt: _Moments
    output: _Moments


def _stats(scheme: ClassScheme, lengths: Iterable[tuple[int, int]]) -> dict[str, _ClassStat]:
    by_class: dict[str, list[tuple[int, int]]] = {}
    for prompt, output in lengths:
        by_class.setdefault(scheme.classify(prompt, output), []).append((prompt, output))
    total = sum(len(v) for v in by_class.values()) or 1

    def moments(values: Sequence[int]) -> _Moments:
        n = len(values)
        mean = sum(values) / n
        var = sum((v - mean) ** 2 for v in values) / max(n - 1, 1)
        return _Moments(n, mean, var)

    return {
        cls: _ClassStat(
            count=len(rows),
            share=len(rows) / total,
            prompt=moments([p for p, _ in rows]),
            output=moments([o for _, o in rows]),
        )
        for cls, rows in by_class.items()
    }


_EMPTY = _ClassStat(count=0, share=0.0, prompt=_Moments(0, 0.0, 0.0), output=_Moments(0, 0.0, 0.0))


def profile_lengths(
    observed: Sequence[tuple[int, int]],
    reference: Sequence[tuple[int, int]],
    scheme: ClassScheme,
    min_bucket_samples: int = 20,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Prompt and output lengths to profile on: the observed ones, bucket by bucket, and the
    reference's for a bucket with fewer than ``min_bucket_samples`` observed.

    The profiler draws a class's prompts from its input bucket and its outputs from its
    output bucket independently (:func:`services.planner.live_profiles.class_pools`), so the
    two sides are chosen apart; every class the reference profiles stays profiled (a class
    the traffic has not sent yet may still arrive).
    """
    sides: list[tuple[int, ...]] = []
    for index, bucket in ((0, scheme.input_bucket), (1, scheme.output_bucket)):
        seen = [pair[index] for pair in observed if pair[0] >= 1 and pair[1] >= 1]
        counts = Counter(bucket(v) for v in seen)
        kept = [v for v in seen if counts[bucket(v)] >= min_bucket_samples]
        kept += [
            pair[index]
            for pair in reference
            if pair[0] >= 1 and pair[1] >= 1 and counts[bucket(pair[index])] < min_bucket_samples
        ]
        sides.append(tuple(sorted(kept)))
    return sides[0], sides[1]
