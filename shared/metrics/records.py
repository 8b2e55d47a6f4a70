"""Per-request outcome records and their columnar (numpy) form.

One :class:`RequestRecord` per request is what the live load generator writes and what the
offline simulator produces; :class:`RecordColumns` is the same data as numpy columns, which
every metric in this package consumes. A simulator that already holds arrays can build
:class:`RecordColumns` directly and skip the per-request objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

__all__ = ["RecordColumns", "RequestRecord", "RequestStatus", "to_columns"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class RequestStatus(StrEnum):
    """How a request ended."""

    OK = "ok"
    """Completed; every token was delivered."""
    SHED = "shed"
    """Rejected or squashed by the scheduler (emergency ladder, admission)."""
    FAILED = "failed"
    """The worker or engine failed it."""
    TIMEOUT = "timeout"
    """The client gave up before completion."""


@dataclass(slots=True, kw_only=True)
class RequestRecord:
    """What happened to one request (times on one clock, in seconds)."""

    request_id: str
    """Unique request identifier."""
    request_class: str
    """Request type (SS…LL) used to group metrics."""
    arrival_s: float
    """Arrival time at the system."""
    latency_budget_s: float
    """Lat_i = N̂·TBT + TTFT on the serving configuration (FREESH Eq. 6)."""
    first_token_s: float | None = None
    """Time the first output token was delivered; None if never."""
    finish_s: float | None = None
    """Time the last output token was delivered; None if not completed."""
    output_tokens: int = 0
    """Output tokens actually produced (the true length when completed)."""
    predicted_output_tokens: int = 0
    """The classifier's predicted output length N̂."""
    prompt_tokens: int = 0
    """Input length in tokens."""
    status: RequestStatus = RequestStatus.OK
    """How the request ended."""
    token_times_s: Sequence[float] | None = None
    """Delivery time of every output token, if recorded (exact Jain and max-waiting)."""


@dataclass(slots=True, kw_only=True)
class RecordColumns:
    """Requests as numpy columns; index i is request i in every array.

    ``first_token_s``/``finish_s`` hold NaN where the event never happened. When per-token
    times are known, ``token_times_flat`` holds them back to back and ``token_offsets``
    (length n + 1) delimits request i as ``token_times_flat[offsets[i]:offsets[i + 1]]``.
    """

    request_class: NDArray[np.str_]
    arrival_s: FloatArray
    first_token_s: FloatArray
    finish_s: FloatArray
    output_tokens: IntArray
    predicted_output_tokens: IntArray
    latency_budget_s: FloatArray
    completed: NDArray[np.bool_]
    token_times_flat: FloatArray | None = None
    token_offsets: IntArray | None = None

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    def subset(self, mask: NDArray[np.bool_]) -> RecordColumns:
        """Return the requests selected by a boolean mask, token times included."""
        flat, offsets = None, None
        if self.token_times_flat is not None and self.token_offsets is not None:
            starts, ends = self.token_offsets[:-1][mask], self.token_offsets[1:][mask]
            lengths = ends - starts
            offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
            index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
            flat = self.token_times_flat[index]
        return RecordColumns(
            request_class=self.request_class[mask],
            arrival_s=self.arrival_s[mask],
            first_token_s=self.first_token_s[mask],
            finish_s=self.finish_s[mask],
            output_tokens=self.output_tokens[mask],
            predicted_output_tokens=self.predicted_output_tokens[mask],
            latency_budget_s=self.latency_budget_s[mask],
            completed=self.completed[mask],
            token_times_flat=flat,
            token_offsets=offsets,
        )


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def to_columns(records: Sequence[RequestRecord]) -> RecordColumns:
    """Convert records to columns; token times are kept only if every record has them."""
    have_tokens = bool(records) and all(r.token_times_s is not None for r in records)
    flat: FloatArray | None = None
    offsets: IntArray | None = None
    if have_tokens:
        lengths = np.fromiter((len(r.token_times_s or ()) for r in records), np.int64, len(records))
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        flat = np.fromiter(
            (t for r in records for t in (r.token_times_s or ())), np.float64, int(offsets[-1])
        )
    return RecordColumns(
        request_class=np.array([r.request_class for r in records], dtype=np.str_),
        arrival_s=np.array([r.arrival_s for r in records], dtype=np.float64),
        first_token_s=np.array([_or_nan(r.first_token_s) for r in records], dtype=np.float64),
        finish_s=np.array([_or_nan(r.finish_s) for r in records], dtype=np.float64),
        output_tokens=np.array([r.output_tokens for r in records], dtype=np.int64),
        predicted_output_tokens=np.array(
            [r.predicted_output_tokens for r in records], dtype=np.int64
        ),
        latency_budget_s=np.array([r.latency_budget_s for r in records], dtype=np.float64),
        completed=np.array(
            [r.status == RequestStatus.OK and r.finish_s is not None for r in records],
            dtype=np.bool_,
        ),
        token_times_flat=flat,
        token_offsets=offsets,
    )
