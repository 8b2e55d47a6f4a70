"""Tests of trace replay and predictor scoring."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from greenserve.bench.predictor import run as predictor_bench
from greenserve.bench.predictor.evaluation import (
    ReplayResult,
    TraceRequest,
    load_azure_trace,
    majority_class_accuracy,
    replay_predictor,
    score_replay,
)
from shared.domain.classes import dynamollm_scheme, freesh_scheme
from shared.paths import data_path

if TYPE_CHECKING:
    from pathlib import Path


@dataclass
class _Recorder:
    """Predicts how many completions it has seen, and records them."""

    name: str = "recorder"
    seen: list[int] = field(default_factory=list)

    def predict(
        self, prompt_tokens: int, *, true_output_tokens: int | None = None, text: str | None = None
    ) -> int:
        return len(self.seen) + 1

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        self.seen.append(output_tokens)


REQUESTS = [TraceRequest(float(t), 10, 100 + t) for t in range(10)]


def test_replay_learns_only_after_the_feedback_lag() -> None:
    """Test that a completion is observed once lag seconds have passed since its arrival."""
    recorder = _Recorder()
    result = replay_predictor(recorder, REQUESTS, held_out_from=5, feedback_lag_s=2.0)
    # Request i (arrival i) has seen requests 0..i-2, so predicts i - 1 + 1.
    assert result.predictions == [5, 6, 7, 8, 9]
    assert result.truths == [105, 106, 107, 108, 109]


def test_frozen_replay_stops_learning_at_the_split() -> None:
    """Test that learn_during_test=False never observes a held-out request."""
    recorder = _Recorder()
    replay_predictor(
        recorder, REQUESTS, held_out_from=4, feedback_lag_s=0.0, learn_during_test=False
    )
    assert recorder.seen == [100, 101, 102, 103]


def test_scores_count_buckets_errors_and_balance() -> None:
    """Test accuracy, MAE, p95 relative error and balanced accuracy on a hand-made replay."""
    result = ReplayResult(truths=[50, 50, 50, 200], predictions=[60, 150, 50, 200])
    score = score_replay(result, [dynamollm_scheme()])
    assert score.requests == 4
    assert score.mae_tokens == pytest.approx((10 + 100 + 0 + 0) / 4)
    assert score.bucket_accuracy["dynamollm9"] == pytest.approx(0.75)
    assert score.balanced_accuracy["dynamollm9"] == pytest.approx((2 / 3 + 1) / 2)
    assert score.p95_relative_error == pytest.approx(2.0)


def test_majority_class_accuracy_is_the_share_of_the_common_bucket() -> None:
    """Test that always naming the learning part's commonest bucket scores its held-out share."""
    accuracy = majority_class_accuracy([10, 20, 500], [10, 500, 600, 700], [freesh_scheme("a")])
    assert accuracy["freesh-a"] == pytest.approx(0.25)


def test_azure_trace_loader_orders_rows_and_measures_seconds(tmp_path: Path) -> None:
    """Test that timestamps become seconds since the first request, in arrival order."""
    path = tmp_path / "trace.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:50.5000000,396,109\n"
        "2023-11-16 18:15:46.5000000,374,44\n",
        encoding="utf-8",
    )
    assert load_azure_trace(path) == [TraceRequest(0.0, 374, 44), TraceRequest(4.0, 396, 109)]


def test_predictor_bench_scores_oracles_as_set_on_the_code_trace() -> None:
    """Test that the bench scores the oracle perfectly and the noisy oracle at its p95 setting."""
    args = argparse.Namespace(traces=["code"], held_out_fraction=0.5, feedback_lag_s=30.0, seed=0)
    result = predictor_bench.run(args)
    code = result["traces"]["code"]
    rows = len(load_azure_trace(data_path("traces", "AzureLLMInferenceTrace_code.csv")))
    assert code["requests_held_out"] + code["requests_learning"] == rows
    assert code["requests_held_out"] == pytest.approx(rows / 2, abs=1)
    assert code["predictors"]["oracle"]["bucket_accuracy"]["dynamollm9"] == 1.0
    noisy = code["predictors"]["oracle-noisy-30"]["p95_relative_error"]
    assert noisy == pytest.approx(0.30, abs=0.03)
    assert result["paper"]["freesh_table9"]["accuracy"] == 0.8715
