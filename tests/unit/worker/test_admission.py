"""Tests for throttLL'eM-style SLO-safe admission (scoreboard, Eq. 1–4)."""

from __future__ import annotations

import numpy as np
import pytest

from services.worker.admission import (
    AdmissionConfig,
    AdmissionVerdict,
    ScoreboardEntry,
    batch_only,
    check_admission,
)
from shared.domain.projection import project_iterations


def _entry(
    rid: str, prompt: int, generated: int, remaining: int, deadline: float | None = None
) -> ScoreboardEntry:
    return ScoreboardEntry(
        request_id=rid,
        prompt_tokens=prompt,
        generated_tokens=generated,
        predicted_remaining_tokens=remaining,
        deadline_s=deadline,
    )


# 10 ms per iteration plus 1 ms per request in the batch.
_LINEAR_TBT = batch_only(lambda batch: 0.010 + 0.001 * batch.astype(np.float64))


def test_projection_matches_eq1_and_eq2_by_hand() -> None:
    """Test batch and KV vectors for two requests with 4-token blocks."""
    projection = project_iterations([_entry("a", 3, 0, 3), _entry("b", 8, 2, 1)], block_tokens=4)
    # a holds 3, 4, 5 tokens → 1, 1, 2 blocks; b holds 10 → 3 blocks, for one iteration.
    assert projection.batch.tolist() == [2, 1, 1]
    assert projection.kv_blocks.tolist() == [4, 1, 2]
    assert projection.last_iteration.tolist() == [2, 0]


def test_light_load_is_admitted_with_projected_finish_times() -> None:
    """Test that an easy candidate is admitted and finish times follow Eq. 3."""
    decision = check_admission(
        [_entry("a", 100, 10, 5, deadline=100.0)],
        _entry("c", 50, 0, 10, deadline=100.0),
        now_s=0.0,
        config=AdmissionConfig(kv_capacity_blocks=1000),
        iteration_time=_LINEAR_TBT,
    )
    assert decision.verdict is AdmissionVerdict.ADMIT
    assert decision.admitted
    assert decision.peak_batch == 2
    # a: 5 iterations at batch 2 → 5 × 12 ms; c: then 5 more at batch 1 → + 5 × 11 ms.
    assert decision.projected_finish_s["a"] == pytest.approx(0.060)
    assert decision.projected_finish_s["c"] == pytest.approx(0.115)


def test_candidate_is_queued_when_kv_would_overflow() -> None:
    """Test the KV-capacity check."""
    decision = check_admission(
        [_entry("a", 64, 0, 10)],
        _entry("c", 64, 0, 10),
        now_s=0.0,
        config=AdmissionConfig(kv_capacity_blocks=8, block_tokens=16),
        iteration_time=_LINEAR_TBT,
    )
    assert decision.verdict is AdmissionVerdict.KV_FULL
    assert not decision.admitted
    assert decision.peak_kv_blocks == 10


def test_candidate_is_queued_when_it_would_break_an_admitted_deadline() -> None:
    """Test Eq. 4: a tight running request is protected and named as endangered."""
    tight = _entry("tight", 10, 0, 100, deadline=1.15)  # alone: 100 × 11 ms = 1.10 s
    decision = check_admission(
        [tight],
        _entry("c", 10, 0, 200, deadline=100.0),
        now_s=0.0,
        config=AdmissionConfig(kv_capacity_blocks=10_000),
        iteration_time=_LINEAR_TBT,
    )
    assert decision.verdict is AdmissionVerdict.DEADLINE
    assert decision.endangered == ("tight",)


def test_candidate_missing_only_its_own_deadline_is_admitted_as_lost() -> None:
    """Test throttLL'eM's "lost" rule for the candidate itself."""
    decision = check_admission(
        [],
        _entry("c", 10, 0, 100, deadline=0.5),
        now_s=0.0,
        config=AdmissionConfig(kv_capacity_blocks=10_000),
        iteration_time=_LINEAR_TBT,
    )
    assert decision.verdict is AdmissionVerdict.ADMIT_LOST
    assert decision.admitted


def test_already_lost_requests_do_not_block_admission() -> None:
    """Test that a request doomed without the candidate is ignored by Eq. 4."""
    doomed = _entry("doomed", 10, 0, 100, deadline=0.5)
    decision = check_admission(
        [doomed],
        _entry("c", 10, 0, 10, deadline=100.0),
        now_s=0.0,
        config=AdmissionConfig(kv_capacity_blocks=10_000),
        iteration_time=_LINEAR_TBT,
    )
    assert decision.verdict is AdmissionVerdict.ADMIT
    assert decision.lost == ("doomed",)


def test_mean_tbt_slo_and_overrun_projection() -> None:
    """Test the average-TBT check and that an overrun request is projected to max tokens."""
    many = [_entry(str(i), 10, 0, 50) for i in range(30)]
    slow = check_admission(
        many,
        _entry("c", 10, 0, 50),
        now_s=0.0,
        config=AdmissionConfig(kv_capacity_blocks=10_000, mean_tbt_slo_s=0.035),
        iteration_time=_LINEAR_TBT,
    )
    assert slow.verdict is AdmissionVerdict.TBT_SLO
    overrun = project_iterations([_entry("o", 10, 300, 0)], block_tokens=16, max_output_tokens=400)
    assert overrun.batch.size == 100
