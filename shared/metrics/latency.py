"""Latency metrics: TTFT, TBT, E2E percentiles, SLO violation rate, Avg MaxWaitingTime.

Definitions (shared by the live load generator and the offline simulator):

- TTFT = first token − arrival; E2E = finish − arrival.
- TBT of a request = (finish − first token) / (tokens − 1): its mean time between tokens
  (TPOT), defined for requests with at least two tokens. Percentiles are over requests.
- Violation (FREESH Eq. 10): E2E > β·Lat_i with β = 5; a request that never completed
  counts as a violation.
- MaxWaiting (FREESH App. C.4): max(TTFT, largest gap between consecutive tokens) per
  request, averaged. Without per-token times the largest gap is taken as the mean TBT,
  which is a lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from shared.metrics.records import RecordColumns

__all__ = [
    "PERCENTILES",
    "SLO_WINDOW_FACTOR",
    "LatencyStats",
    "e2e_s",
    "latency_stats",
    "max_waiting_s",
    "mean_tbt_s",
    "ttft_s",
    "violations",
]

FloatArray = NDArray[np.float64]

SLO_WINDOW_FACTOR: Final = 5.0
"""FREESH β_LLF: a request violates its SLO when E2E exceeds 5·Lat (Eq. 10)."""

PERCENTILES: Final = (50.0, 90.0, 99.0)
"""Percentiles reported for every latency."""


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Mean and percentiles of one latency over a set of requests (seconds)."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float

    def as_dict(self) -> dict[str, float | int | None]:
        """Return a JSON-friendly dict (NaN becomes None)."""
        return {
            "count": self.count,
            "mean": _finite(self.mean),
            "p50": _finite(self.p50),
            "p90": _finite(self.p90),
            "p99": _finite(self.p99),
        }


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def latency_stats(values: FloatArray) -> LatencyStats:
    """Return mean/P50/P90/P99 of the finite entries of ``values`` (NaN when none)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        nan = float("nan")
        return LatencyStats(0, nan, nan, nan, nan)
    p50, p90, p99 = np.percentile(finite, PERCENTILES)
    return LatencyStats(int(finite.size), float(finite.mean()), float(p50), float(p90), float(p99))


def ttft_s(columns: RecordColumns) -> FloatArray:
    """Return per-request TTFT (NaN where no token was delivered)."""
    return columns.first_token_s - columns.arrival_s


def e2e_s(columns: RecordColumns) -> FloatArray:
    """Return per-request end-to-end latency (NaN where not completed)."""
    return np.where(columns.completed, columns.finish_s - columns.arrival_s, np.nan)


def mean_tbt_s(columns: RecordColumns) -> FloatArray:
    """Return per-request mean time between tokens (NaN below two tokens)."""
    gaps = columns.output_tokens - 1
    span = columns.finish_s - columns.first_token_s
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(columns.completed & (gaps > 0), span / np.maximum(gaps, 1), np.nan)


def violations(columns: RecordColumns, factor: float = SLO_WINDOW_FACTOR) -> NDArray[np.bool_]:
    """Return per-request SLO violation flags: E2E > factor·Lat or not completed (Eq. 10)."""
    late = (columns.finish_s - columns.arrival_s) > factor * columns.latency_budget_s
    return ~columns.completed | late


def _largest_token_gap_s(columns: RecordColumns) -> FloatArray:
    flat, offsets = columns.token_times_flat, columns.token_offsets
    if flat is None or offsets is None:
        return np.nan_to_num(mean_tbt_s(columns), nan=0.0)
    gaps = np.diff(flat, prepend=flat[:1]) if flat.size else flat
    # The first token of each request has no predecessor in that request.
    starts = offsets[:-1]
    has_tokens = offsets[1:] > starts
    gaps[starts[has_tokens]] = 0.0
    largest = np.zeros(len(columns), dtype=np.float64)
    if flat.size:
        largest[has_tokens] = np.maximum.reduceat(gaps, starts[has_tokens])
    return largest


def max_waiting_s(columns: RecordColumns) -> FloatArray:
    """Return per-request max(TTFT, largest inter-token gap) (FREESH App. C.4)."""
    return np.fmax(ttft_s(columns), _largest_token_gap_s(columns))
