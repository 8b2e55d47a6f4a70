"""Tests for the FREESH Eq. 9 Jain index and the repo's gap fairness."""

from __future__ import annotations

import numpy as np
import pytest

from shared.metrics import RequestRecord, gap_fairness, jain_index, quartile_jain, to_columns
from shared.metrics.fairness import quartile_clients, tokens_within_window


def _even_record(
    rid: int, arrival: float, first: float, tbt: float, n: int, lat: float, *, times: bool
) -> RequestRecord:
    token_times = [first + k * tbt for k in range(n)]
    return RequestRecord(
        request_id=str(rid),
        request_class="SL",
        arrival_s=arrival,
        first_token_s=first,
        finish_s=token_times[-1],
        output_tokens=n,
        predicted_output_tokens=n,
        latency_budget_s=lat,
        token_times_s=token_times if times else None,
    )


def test_jain_index_is_one_when_equal_and_one_over_n_when_one_takes_all() -> None:
    """Test the two extremes of Jain's index."""
    assert jain_index(np.array([3.0, 3.0, 3.0, 3.0])) == pytest.approx(1.0)
    assert jain_index(np.array([5.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert np.isnan(jain_index(np.zeros(4)))


def test_quartile_clients_split_by_output_length_rank() -> None:
    """Test that clients are equal-size output-length quartiles."""
    clients = quartile_clients(np.array([400, 10, 30, 20, 300, 200, 100, 40], dtype=np.int64))
    assert clients.tolist() == [3, 0, 1, 0, 3, 2, 2, 1]


def test_token_counts_within_window_agree_with_and_without_token_times() -> None:
    """Test that evenly spaced tokens give the same x_i exactly and by interpolation."""
    rng = np.random.default_rng(3)
    specs = [
        (
            i,
            rng.uniform(0, 5),
            rng.uniform(0, 20),
            rng.uniform(0.01, 0.1),
            int(rng.integers(1, 300)),
            rng.uniform(1, 15),
        )
        for i in range(50)
    ]
    exact = tokens_within_window(to_columns([_even_record(*s, times=True) for s in specs]))
    approx = tokens_within_window(to_columns([_even_record(*s, times=False) for s in specs]))
    # Interpolation can differ only by float rounding at the boundary token.
    assert np.max(np.abs(exact - approx)) <= 1.0
    assert np.mean(exact == approx) > 0.9


def test_quartile_jain_counts_only_tokens_inside_the_client_window() -> None:
    """Test Eq. 9 on a hand example: one quartile gets no on-time tokens."""
    records = [
        # lengths 1, 2, 3, 4 → one request per quartile client; Lat = 10 → window 14 s.
        _even_record(0, 0.0, 1.0, 1.0, 1, 10.0, times=True),  # 1 token on time
        _even_record(1, 0.0, 1.0, 1.0, 2, 10.0, times=True),  # 2 on time
        _even_record(2, 0.0, 20.0, 1.0, 3, 10.0, times=True),  # 0 on time
        _even_record(3, 0.0, 12.0, 1.0, 4, 10.0, times=True),  # 12, 13, 14 on time → 3
    ]
    x = np.array([1.0, 2.0, 0.0, 3.0])
    assert tokens_within_window(to_columns(records)).tolist() == x.tolist()
    assert quartile_jain(to_columns(records)) == pytest.approx(36 / (4 * 14))


def test_gap_fairness_matches_a_hand_computed_epoch() -> None:
    """Test the repo metric: gap within a backlogged epoch over mean total service."""
    produced = np.array([[2.0, 0.0], [2.0, 1.0], [0.0, 3.0]])
    backlogged = np.array([[True, True], [True, True], [False, True]])
    # Epoch 1 (ticks 0-1): served (2,0) then (4,1) → gap 3; epoch 2 has one client.
    assert gap_fairness(produced, backlogged) == pytest.approx(1 - 3 / 4)
    assert gap_fairness(np.ones((3, 2)), np.ones((3, 2), dtype=bool)) == pytest.approx(1.0)
