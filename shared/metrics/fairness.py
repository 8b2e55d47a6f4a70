"""Fairness metrics: FREESH Eq. 9 quartile-client Jain index and the repo's gap metric.

FREESH Eq. 9: split the requests of one workload type into K = 4 clients by output-token
quartile; request i earns x_i = the number of its tokens delivered within W_i = 1.4·Lat_i
of its arrival; client k earns X_k = Σ x_i; Jain = (Σ X_k)² / (K · Σ X_k²) ∈ [1/K, 1].

The public FREESH simulator (``LLF-simulation.py``) reports a different number, kept here as
:func:`gap_fairness` so both can be printed side by side: clients are request ids round-robin,
service is counted per tick only for backlogged clients and reset whenever the backlogged
set changes, and fairness = 1 − max_gap / mean total service.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from shared.metrics.records import RecordColumns

__all__ = [
    "CLIENT_WINDOW_FACTOR",
    "JAIN_CLIENTS",
    "gap_fairness",
    "jain_index",
    "quartile_clients",
    "quartile_jain",
    "tokens_within_window",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

JAIN_CLIENTS: Final = 4
"""FREESH Eq. 9: K = 4 clients, one per output-length quartile."""

CLIENT_WINDOW_FACTOR: Final = 1.4
"""FREESH α_LLF: a token counts for fairness if delivered within 1.4·Lat of arrival."""


def jain_index(values: FloatArray) -> float:
    """Return Jain's index (Σx)² / (n·Σx²); NaN when every value is zero or none given."""
    total_sq = float(np.square(values).sum())
    if values.size == 0 or total_sq == 0.0:
        return float("nan")
    return float(values.sum() ** 2 / (values.size * total_sq))


def tokens_within_window(
    columns: RecordColumns, factor: float = CLIENT_WINDOW_FACTOR
) -> FloatArray:
    """Return x_i: tokens of request i delivered within factor·Lat_i of arrival (Eq. 9).

    With per-token times the count is exact; otherwise tokens are assumed evenly spaced
    between the first token and the finish (the last token of an unfinished request is
    unknown, so only its first token can count).
    """
    deadline = columns.arrival_s + factor * columns.latency_budget_s
    flat, offsets = columns.token_times_flat, columns.token_offsets
    if flat is not None and offsets is not None:
        on_time = flat <= np.repeat(deadline, np.diff(offsets))
        running = np.concatenate(([0], np.cumsum(on_time)))
        return (running[offsets[1:]] - running[offsets[:-1]]).astype(np.float64)
    first, n = columns.first_token_s, columns.output_tokens.astype(np.float64)
    started = np.isfinite(first) & (first <= deadline)
    spaced = columns.completed & (n > 1)
    step = np.where(spaced, (columns.finish_s - first) / np.maximum(n - 1, 1), np.inf)
    with np.errstate(invalid="ignore"):
        evenly = np.where(step > 0, np.floor((deadline - first) / step) + 1, n)
    full = np.clip(np.nan_to_num(evenly, nan=0.0), 0.0, n)
    counted = np.where(columns.completed, full, np.minimum(1.0, n))
    return np.where(started, counted, 0.0)


def quartile_clients(output_tokens: IntArray, clients: int = JAIN_CLIENTS) -> IntArray:
    """Assign each request to one of ``clients`` equal-size groups by output-length rank."""
    order = np.argsort(output_tokens, kind="stable")
    client = np.empty(output_tokens.size, dtype=np.int64)
    client[order] = (np.arange(output_tokens.size) * clients) // max(output_tokens.size, 1)
    return client


def quartile_jain(
    columns: RecordColumns,
    clients: int = JAIN_CLIENTS,
    factor: float = CLIENT_WINDOW_FACTOR,
) -> float:
    """Return FREESH Eq. 9 Jain fairness for one workload type (NaN if no on-time token)."""
    if len(columns) == 0:
        return float("nan")
    x = tokens_within_window(columns, factor)
    per_client = np.bincount(
        quartile_clients(columns.output_tokens, clients), weights=x, minlength=clients
    )
    return jain_index(per_client.astype(np.float64))


def gap_fairness(produced: FloatArray, backlogged: NDArray[np.bool_]) -> float:
    """Return the FREESH repo's gap fairness, 1 − max_gap / mean total service.

    Args:
        produced: tokens produced per tick and client, shape (ticks, clients).
        backlogged: whether each client had an arrived, unfinished request in that tick.
    """
    if produced.size == 0:
        return 1.0
    clients = int(produced.shape[1])
    changed = np.ones(produced.shape[0], dtype=np.bool_)
    changed[1:] = np.any(backlogged[1:] != backlogged[:-1], axis=1)
    epoch = np.cumsum(changed) - 1
    served = np.where(backlogged, produced, 0.0)
    # Service accumulated since the start of the current epoch, per tick and client.
    cumulative = np.cumsum(served, axis=0)
    epoch_start = np.flatnonzero(changed)
    before = np.vstack([np.zeros((1, clients)), cumulative])[epoch_start][epoch]
    in_epoch = cumulative - before
    counted = backlogged.sum(axis=1) >= 2
    largest = np.where(backlogged, in_epoch, -np.inf).max(axis=1)
    smallest = np.where(backlogged, in_epoch, np.inf).min(axis=1)
    max_gap = float(np.max(np.where(counted, largest - smallest, 0.0)))
    mean_service = float(produced.sum()) / clients
    if mean_service <= 1e-9:
        return 1.0
    return max(0.0, 1.0 - max_gap / mean_service)
