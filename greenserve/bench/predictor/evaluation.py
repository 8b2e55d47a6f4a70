"""Scoring output-length predictors on a request trace, as μ-Serve §3 and FREESH §2.6 report.

Metrics: bucket accuracy (share of requests whose predicted output length lands in the same
output bucket as the true length, per class scheme) and mean absolute error in tokens.

Replay is prequential with a feedback lag: requests are taken in arrival order; a request's
true length is fed to ``observe`` only once ``feedback_lag_s`` has passed since its arrival
(standing in for its end-to-end latency, since a length is known only after completion).
The first ``held_out_from`` requests are the learning part and are not scored; the rest are
held out and scored. With ``learn_during_test`` False the model is frozen at the split.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from shared.domain.classes import ClassScheme, OutputLengthPredictor

__all__ = [
    "PredictorScore",
    "ReplayResult",
    "TraceRequest",
    "load_azure_trace",
    "majority_class_accuracy",
    "replay_predictor",
    "score_replay",
]


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a length trace."""

    arrival_s: float
    """Seconds since the trace's first request."""
    prompt_tokens: int
    output_tokens: int


def load_azure_trace(path: Path) -> list[TraceRequest]:
    """Load an Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Explicit loader (does I/O); rows are returned in arrival order.

    Raises:
        ValueError: when a row is malformed.
    """
    rows: list[tuple[datetime, int, int]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            try:
                stamp = datetime.fromisoformat(row["TIMESTAMP"].strip())
                rows.append((stamp, int(row["ContextTokens"]), int(row["GeneratedTokens"])))
            except (KeyError, ValueError, AttributeError) as error:
                raise ValueError(f"malformed trace row in {path}: {row}") from error
    rows.sort(key=lambda item: item[0])
    if not rows:
        return []
    start = rows[0][0]
    return [
        TraceRequest((stamp - start).total_seconds(), prompt, output)
        for stamp, prompt, output in rows
    ]


@runtime_checkable
class _ClassShares(Protocol):
    def output_class_shares(self, prompt_tokens: int, scheme: ClassScheme) -> tuple[float, ...]: ...


@dataclass(slots=True)
class ReplayResult:
    """What a predictor said about each held-out request."""

    truths: list[int] = field(default_factory=list)
    predictions: list[int] = field(default_factory=list)
    modal_buckets: dict[str, list[int]] = field(default_factory=dict)
    """Per scheme, the most likely output bucket, for predictors that expose class shares."""


def replay_predictor(
    predictor: OutputLengthPredictor,
    requests: Sequence[TraceRequest],
    *,
    held_out_from: int,
    feedback_lag_s: float,
    learn_during_test: bool = True,
    schemes: Sequence[ClassScheme] = (),
) -> ReplayResult:
    """Replay ``requests`` through ``predictor`` and record predictions on the held-out part.

    Raises:
        ValueError: when the split or the lag is out of range.
    """
    if not 0 <= held_out_from <= len(requests):
        raise ValueError(f"held_out_from {held_out_from} outside 0..{len(requests)}")
    if feedback_lag_s < 0:
        raise ValueError(f"feedback_lag_s must be ≥ 0, got {feedback_lag_s}")
    shares = predictor if isinstance(predictor, _ClassShares) else None
    result = ReplayResult(modal_buckets={s.name: [] for s in schemes} if shares else {})
    observed = 0
    for index, request in enumerate(requests):
        stop = index if learn_during_test else min(index, held_out_from)
        while (
            observed < stop and requests[observed].arrival_s + feedback_lag_s <= request.arrival_s
        ):
            done = requests[observed]
            predictor.observe(done.prompt_tokens, done.output_tokens)
            observed += 1
        if index < held_out_from:
            continue
        result.truths.append(request.output_tokens)
        result.predictions.append(
            predictor.predict(request.prompt_tokens, true_output_tokens=request.output_tokens)
        )
        if shares is not None:
            for scheme in schemes:
                probabilities = shares.output_class_shares(request.prompt_tokens, scheme)
                result.modal_buckets[scheme.name].append(
                    max(range(len(probabilities)), key=probabilities.__getitem__)
                )
    return result


@dataclass(frozen=True, slots=True)
class PredictorScore:
    """Accuracy of one predictor on one held-out set."""

    requests: int
    mae_tokens: float
    p95_relative_error: float
    """p95 of |predicted − true| / true over requests with a non-zero true length."""
    bucket_accuracy: dict[str, float]
    """Per scheme name: share of requests whose predicted length has the true output bucket."""
    balanced_accuracy: dict[str, float]
    """Per scheme: mean over true buckets present of the share predicted right (recall), which,
    unlike accuracy, does not reward always naming the most common bucket."""
    modal_bucket_accuracy: dict[str, float] | None
    """Per scheme: accuracy when the predicted bucket is the model's most likely one."""


def _p95(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def _balanced_accuracy(pairs: Sequence[tuple[int, int]]) -> float:
    """Mean per-true-bucket recall of (true bucket, predicted bucket) pairs."""
    hits: dict[int, int] = {}
    totals: dict[int, int] = {}
    for truth, guess in pairs:
        totals[truth] = totals.get(truth, 0) + 1
        hits[truth] = hits.get(truth, 0) + (truth == guess)
    return sum(hits[bucket] / totals[bucket] for bucket in totals) / len(totals)


def majority_class_accuracy(
    learning_lengths: Sequence[int], held_out_lengths: Sequence[int], schemes: Sequence[ClassScheme]
) -> dict[str, float]:
    """Return, per scheme, the held-out accuracy of always naming the learning part's most
    common output bucket: the floor any predictor's bucket accuracy should be read against.

    Raises:
        ValueError: when either part is empty.
    """
    if not learning_lengths or not held_out_lengths:
        raise ValueError("both the learning and the held-out part need requests")
    accuracy: dict[str, float] = {}
    for scheme in schemes:
        buckets = [scheme.output_bucket(length) for length in learning_lengths]
        majority = max(set(buckets), key=buckets.count)
        right = sum(scheme.output_bucket(length) == majority for length in held_out_lengths)
        accuracy[scheme.name] = right / len(held_out_lengths)
    return accuracy


def score_replay(result: ReplayResult, schemes: Sequence[ClassScheme]) -> PredictorScore:
    """Compute bucket accuracy, MAE and p95 relative error of a replay.

    Raises:
        ValueError: when the replay scored no request.
    """
    count = len(result.truths)
    if count == 0:
        raise ValueError("no held-out request was scored")
    pairs = list(zip(result.truths, result.predictions, strict=True))
    mae = sum(abs(guess - truth) for truth, guess in pairs) / count
    relative = [abs(guess - truth) / truth for truth, guess in pairs if truth > 0]
    accuracy = {
        scheme.name: sum(
            scheme.output_bucket(truth) == scheme.output_bucket(guess) for truth, guess in pairs
        )
        / count
        for scheme in schemes
    }
    balanced = {
        scheme.name: _balanced_accuracy(
            [(scheme.output_bucket(truth), scheme.output_bucket(guess)) for truth, guess in pairs]
        )
        for scheme in schemes
    }
    modal: dict[str, float] | None = None
    if result.modal_buckets:
        modal = {
            scheme.name: sum(
                scheme.output_bucket(truth) == bucket
                for truth, bucket in zip(
                    result.truths, result.modal_buckets[scheme.name], strict=True
                )
            )
            / count
            for scheme in schemes
        }
    return PredictorScore(
        requests=count,
        mae_tokens=mae,
        p95_relative_error=_p95(relative),
        bucket_accuracy=accuracy,
        balanced_accuracy=balanced,
        modal_bucket_accuracy=modal,
    )
