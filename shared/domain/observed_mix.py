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

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shared.domain.classes import ClassScheme

__all__ = ["ObservedMix", "ObservedMixSettings", "profile_lengths"]

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
        """Whether the sample has moved away from ``reference`` (the profiled lengths)."""
        seen = self.sample()
        if seen is None or not reference:
            return False
        ours, theirs = self._stats(seen), self._stats(reference)
        classes = set(ours) | set(theirs)
        share = 0.5 * sum(abs(ours.get(c, _EMPTY).share - theirs.get(c, _EMPTY).share)
                          for c in classes)  # fmt: skip
        if share > self.settings.share_shift:
            return True
        for cls, stat in ours.items():
            if stat.share < self.settings.min_class_share:
                continue
            ref = theirs.get(cls)
            if ref is None:
                return True
            for mine, other in ((stat.prompt, ref.prompt), (stat.output, ref.output)):
                if abs(mine - other) > self.settings.size_shift * other:
                    return True
        return False

    def _stats(self, lengths: Iterable[tuple[int, int]]) -> dict[str, _ClassStat]:
        sums: dict[str, list[float]] = {}
        for prompt, output in lengths:
            row = sums.setdefault(self.scheme.classify(prompt, output), [0.0, 0.0, 0.0])
            row[0] += 1.0
            row[1] += prompt
            row[2] += output
        total = sum(r[0] for r in sums.values()) or 1.0
        return {
            cls: _ClassStat(share=n / total, prompt=p / n, output=o / n)
            for cls, (n, p, o) in sums.items()
        }


@dataclass(frozen=True, slots=True)
class _ClassStat:
    share: float
    prompt: float
    output: float


_EMPTY = _ClassStat(share=0.0, prompt=0.0, output=0.0)


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
