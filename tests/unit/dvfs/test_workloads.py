"""The bench workloads built from the Azure conversation trace."""

from __future__ import annotations

import numpy as np

from greenserve.bench.dvfs.workloads import (
    freesh_ss_workload,
    throttllem_workload,
    with_predicted_lengths,
)


def test_freesh_workload_is_all_ss_under_partition_b() -> None:
    """Test that every drawn request is short-short (prompt < 25, output < 232 tokens)."""
    arrivals, info = freesh_ss_workload(minutes=2.0)
    assert arrivals
    assert all(a.prompt_tokens < 25 and a.output_tokens < 232 for a in arrivals)
    assert all(a.arrival_s < 120.0 for a in arrivals)
    assert info["requests"] == len(arrivals)


def test_throttllem_workload_peaks_at_the_requested_rate() -> None:
    """Test that the busiest minute of the compressed trace carries the wanted load."""
    arrivals, _ = throttllem_workload(minutes=10.0, peak_rps=6.0)
    times = np.array([a.arrival_s for a in arrivals])
    busiest = np.bincount((times // 60.0).astype(np.int64)).max() / 60.0
    assert abs(busiest - 6.0) < 0.3  # minute bins shift when the trace is compressed


def test_predicted_lengths_keep_95_percent_within_the_error_bound() -> None:
    """Test that noisy predictions stay within e_p95 of the truth for ~95 % of requests."""
    arrivals, _ = throttllem_workload(minutes=10.0)
    noisy = with_predicted_lengths(arrivals, 0.3, seed=0)
    error = np.array(
        [abs((n.predicted_output_tokens or 0) - a.output_tokens) / a.output_tokens
         for a, n in zip(arrivals, noisy, strict=True)]
    )  # fmt: skip
    assert 0.92 < float(np.mean(error <= 0.3 + 1e-9)) < 0.98
    assert with_predicted_lengths(arrivals, 0.0, seed=0) is arrivals
