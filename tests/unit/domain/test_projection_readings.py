"""The admission and the DVFS readings of throttLL'eM's projection are one model."""

from __future__ import annotations

import numpy as np
import pytest

from services.dvfs.controller import RequestState
from services.worker.admission import ScoreboardEntry
from shared.domain.projection import project_iterations, project_segments


def _cases() -> list[list[tuple[int, int, int]]]:
    rng = np.random.default_rng(7)
    cases = [[(30, 0, 5), (17, 4, 9), (100, 50, 1), (1, 0, 16)]]
    for _ in range(20):
        n = int(rng.integers(1, 8))
        cases.append(
            [
                (int(rng.integers(1, 900)), int(rng.integers(0, 300)), int(rng.integers(1, 120)))
                for _ in range(n)
            ]
        )
    return cases


@pytest.mark.parametrize("requests", _cases())
@pytest.mark.parametrize("block", [1, 16, 17])
def test_one_segment_per_iteration_is_the_per_iteration_projection(
    requests: list[tuple[int, int, int]], block: int
) -> None:
    """Test that with a segment per iteration the DVFS projection equals admission's."""
    states = [
        RequestState(
            request_id=f"r{i}",
            prompt_tokens=p,
            generated_tokens=g,
            predicted_remaining_tokens=r,
            deadline_s=1.0,
        )
        for i, (p, g, r) in enumerate(requests)
    ]
    entries = [
        ScoreboardEntry(
            request_id=f"r{i}", prompt_tokens=p, generated_tokens=g, predicted_remaining_tokens=r
        )
        for i, (p, g, r) in enumerate(requests)
    ]
    horizon = max(r for _, _, r in requests)
    segments = project_segments(states, block_size=block, max_segments=horizon)
    iterations = project_iterations(entries, block)
    assert segments.iterations.tolist() == [1] * horizon
    assert segments.batch.tolist() == iterations.batch.astype(float).tolist()
    assert segments.kv_blocks.tolist() == iterations.kv_blocks.astype(float).tolist()
    assert segments.finish_iteration.tolist() == iterations.last_iteration.tolist()


def test_the_readings_differ_only_on_a_used_up_prediction() -> None:
    """Test that a request past its prediction runs one more iteration for DVFS and to the
    longest allowed output for admission."""
    state = RequestState(
        request_id="o",
        prompt_tokens=10,
        generated_tokens=300,
        predicted_remaining_tokens=0,
        deadline_s=1.0,
    )
    entry = ScoreboardEntry(
        request_id="o", prompt_tokens=10, generated_tokens=300, predicted_remaining_tokens=0
    )
    assert project_segments([state], block_size=16).horizon == 1
    assert project_iterations([entry], 16, max_output_tokens=400).batch.size == 100
