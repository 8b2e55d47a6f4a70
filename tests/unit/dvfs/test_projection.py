"""throttLL'eM Eq. 1–2 projection against a brute-force iteration-by-iteration count."""

from __future__ import annotations

import math

import pytest

from services.dvfs.controller import RequestState
from shared.domain.projection import ExpectedArrivals, project_segments, with_arrivals


def _request(prompt: int, generated: int, remaining: int) -> RequestState:
    return RequestState(
        request_id=f"r{prompt}-{generated}-{remaining}",
        prompt_tokens=prompt,
        generated_tokens=generated,
        predicted_remaining_tokens=remaining,
        deadline_s=100.0,
    )


def test_projection_matches_brute_force_when_every_iteration_is_a_segment() -> None:
    """Test that B[j] and KV[j] equal a direct count over each future iteration."""
    requests = [_request(30, 0, 5), _request(17, 4, 9), _request(100, 50, 1), _request(1, 0, 16)]
    block = 16
    got = project_segments(requests, block_size=block, max_segments=1000)
    horizon = max(r.predicted_remaining_tokens for r in requests)
    assert got.horizon == horizon
    for j in range(horizon):
        active = [r for r in requests if j < r.predicted_remaining_tokens]
        expected_kv = sum(
            math.ceil((r.prompt_tokens + r.generated_tokens + j) / block) for r in active
        )
        assert got.batch[j] == len(active)
        assert got.kv_blocks[j] == expected_kv
    assert got.finish_iteration.tolist() == [4, 8, 0, 15]


def test_segments_cover_the_whole_horizon() -> None:
    """Test that compressed segments stand for exactly the horizon's iterations."""
    got = project_segments(
        [_request(10, 0, 1000), _request(10, 0, 333)], block_size=16, max_segments=32
    )
    assert got.batch.size == 32
    assert got.horizon == 1000
    assert got.batch[0] == 2
    assert got.batch[-1] == 1


def test_projecting_nothing_is_an_error() -> None:
    """Test that an empty instance has no projection."""
    with pytest.raises(ValueError, match="nothing"):
        project_segments([], block_size=16)


def test_expected_arrivals_fill_the_batch_by_littles_law() -> None:
    """Test that a stream adds a·min(j, o) requests and their KV, and leaves finishes alone."""
    base = project_segments([_request(10, 0, 400)], block_size=16, max_segments=400)
    stream = ExpectedArrivals(per_iteration=0.5, prompt_tokens=64.0, output_tokens=100.0)
    loaded = with_arrivals(base, stream, block_size=16)
    extra = loaded.batch - base.batch
    assert extra[0] == 0.0  # nobody has arrived before the next iteration
    assert extra[50] == pytest.approx(25.0)
    assert extra[399] == pytest.approx(50.0)  # steady state: rate × lifetime
    # 50 requests aged 0..100 tokens hold (64 + 50)/16 blocks each, plus half a block.
    assert (loaded.kv_blocks - base.kv_blocks)[399] == pytest.approx(50.0 * (114.0 / 16 + 0.5))
    assert loaded.finish_iteration.tolist() == base.finish_iteration.tolist()
    idle = ExpectedArrivals(per_iteration=0.0, prompt_tokens=64.0, output_tokens=100.0)
    assert with_arrivals(base, idle, block_size=16) is base
