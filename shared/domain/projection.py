"""throttLL'eM's batch and KV projection over future iterations (seed 002 §1, Eq. 1–2). Pure.

Assume no new arrivals; every request on the instance produces one token per iteration
until it reaches its predicted length. At future iteration j (0 = the next one):

    B[j]  = #{ i : j < r_i }                                   (batch size)
    KV[j] = Σ_{i : j < r_i} ceil((c_i + j) / N)                (Eq. 1, Eq. 2)

where r_i is request i's predicted remaining tokens, c_i its current context (prompt plus
generated tokens) and N the KV block size. Queued requests are projected as if admitted
now (their prefill is not modelled, as in the paper).

One model, two readings of it, both computed by :func:`_batch_and_kv`:

- :func:`project_iterations` (admission, ``services.worker.admission``) evaluates every
  iteration of the horizon exactly, as integers, because the admission check sums a time
  per iteration up to each request's last one (Eq. 3–4). A request whose prediction is used
  up (``predicted_remaining_tokens`` ≤ 0) is projected to the worst allowed length
  (``max_output_tokens`` minus what it generated, throttLL'eM §1.2), and nothing to project
  gives an empty projection.
- :func:`project_segments` (predictive DVFS, ``services.dvfs.predictive``) probes many
  clocks per control period; its horizon can run to thousands of iterations and the IPS
  model costs ~0.2 µs per tree and row, so the horizon is cut into at most
  ``max_segments`` equal segments, each evaluated at its midpoint and standing for all of
  its iterations (floats, so that :func:`with_arrivals` can add fractional requests). A
  request's remaining tokens count as at least 1; nothing to project is an error.

:func:`with_arrivals` is our extension (throttLL'eM assumes no new arrivals): it adds the
requests expected to arrive during the horizon at an observed rate, which keep the batch
from draining as the Eq. 1 projection assumes (see ``docs/dvfs.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "ExpectedArrivals",
    "FloatArray",
    "IntArray",
    "IterationProjection",
    "ProjectedRequest",
    "SegmentProjection",
    "project_iterations",
    "project_segments",
    "with_arrivals",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class ProjectedRequest(Protocol):
    """What the projection reads of a request (the DVFS agent's and the worker's records)."""

    @property
    def prompt_tokens(self) -> int:
        """Prompt length |q_i|: the KV the request holds before its first output token."""
        ...

    @property
    def generated_tokens(self) -> int:
        """Output tokens already produced."""
        ...

    @property
    def predicted_remaining_tokens(self) -> int:
        """Tokens still to produce, as predicted."""
        ...


def _batch_and_kv(
    context: IntArray, remaining: IntArray, at: IntArray, block_tokens: int
) -> tuple[IntArray, IntArray]:
    """B and KV (Eq. 1–2) at future iterations ``at`` of requests with ``context`` tokens
    held now and ``remaining`` iterations to go."""
    active = at[:, None] < remaining[None, :]
    blocks = -(-(context[None, :] + at[:, None]) // block_tokens)
    batch = active.sum(axis=1).astype(np.int64)
    kv = np.where(active, blocks, 0).sum(axis=1).astype(np.int64)
    return batch, kv


def _context(requests: Sequence[ProjectedRequest]) -> IntArray:
    return np.fromiter(
        (r.prompt_tokens + r.generated_tokens for r in requests), np.int64, len(requests)
    )


@dataclass(frozen=True, slots=True)
class IterationProjection:
    """Per-iteration projection from the current iteration k (index 0) onward."""

    batch: IntArray
    """B[j]: active requests at iteration k + j (Eq. 1 support)."""
    kv_blocks: IntArray
    """KV[j]: KV blocks in use at iteration k + j (Eq. 2)."""
    last_iteration: IntArray
    """l_i − k: index of each request's last iteration, in input order."""


def _remaining_or_overrun(requests: Sequence[ProjectedRequest], max_output_tokens: int) -> IntArray:
    generated = np.array([r.generated_tokens for r in requests], dtype=np.int64)
    remaining = np.array([r.predicted_remaining_tokens for r in requests], dtype=np.int64)
    # A request past its prediction keeps running; assume the worst allowed length.
    overrun = np.maximum(max_output_tokens - generated, 1)
    return np.where(remaining > 0, remaining, overrun)


def project_iterations(
    requests: Sequence[ProjectedRequest], block_tokens: int, max_output_tokens: int = 4096
) -> IterationProjection:
    """Project batch size and KV blocks at every future iteration (throttLL'eM Eq. 1–2)."""
    if not requests:
        empty = np.zeros(0, dtype=np.int64)
        return IterationProjection(empty, empty, empty)
    remaining = _remaining_or_overrun(requests, max_output_tokens)
    steps = np.arange(int(remaining.max()), dtype=np.int64)
    batch, kv = _batch_and_kv(_context(requests), remaining, steps, block_tokens)
    return IterationProjection(batch, kv, remaining - 1)


@dataclass(frozen=True, slots=True)
class SegmentProjection:
    """Projected batch and KV usage, one entry per horizon segment."""

    batch: FloatArray
    """B at each segment's midpoint."""
    kv_blocks: FloatArray
    """KV at each segment's midpoint."""
    iterations: IntArray
    """Iterations each segment stands for (they sum to the horizon length)."""
    finish_iteration: IntArray
    """Per request (input order): index of the iteration that emits its last token."""
    midpoints: IntArray
    """Iteration (0 = the next one) at which each segment is evaluated."""

    @property
    def horizon(self) -> int:
        """Iterations until the last request finishes."""
        return int(self.iterations.sum())


def project_segments(
    requests: Sequence[ProjectedRequest], *, block_size: int, max_segments: int = 32
) -> SegmentProjection:
    """Return the Eq. 1–2 projection of ``requests`` (at least one), by horizon segment.

    Args:
        requests: requests on the instance (running and queued).
        block_size: tokens per KV block (N).
        max_segments: most horizon segments to evaluate.

    Raises:
        ValueError: when ``requests`` is empty.
    """
    if not requests:
        raise ValueError("nothing to project")
    remaining = np.fromiter(
        (max(r.predicted_remaining_tokens, 1) for r in requests), np.int64, len(requests)
    )
    horizon = int(remaining.max())
    segments = min(max_segments, horizon)
    edges = np.linspace(0, horizon, segments + 1).round().astype(np.int64)
    iterations = np.diff(edges)
    midpoints = (edges[:-1] + edges[1:] - 1) // 2
    batch, kv = _batch_and_kv(_context(requests), remaining, midpoints, block_size)
    return SegmentProjection(
        batch=batch.astype(np.float64),
        kv_blocks=kv.astype(np.float64),
        iterations=iterations,
        finish_iteration=remaining - 1,
        midpoints=midpoints,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpectedArrivals:
    """Requests expected to join the instance during the horizon (our extension)."""

    per_iteration: float
    """Mean new requests per engine iteration (arrival rate × seconds per iteration)."""
    prompt_tokens: float
    """Mean prompt length of the expected requests."""
    output_tokens: float
    """Mean predicted output length (iterations each one stays in the batch)."""


def with_arrivals(
    projection: SegmentProjection, arrivals: ExpectedArrivals, *, block_size: int
) -> SegmentProjection:
    """Return ``projection`` with the batch and KV of expected arrivals added.

    A steady stream of ``a`` requests per iteration, each decoding for ``o`` iterations,
    holds ``a·min(j, o)`` requests at future iteration j (Little's law once j ≥ o), aged
    uniformly from 0 to min(j, o), so their mean context is ``p + min(j, o)/2`` tokens.
    The per-request finishes are unchanged: new requests only slow the ones already here.
    """
    if arrivals.per_iteration <= 0.0 or arrivals.output_tokens <= 0.0:
        return projection
    age = np.minimum(projection.midpoints.astype(np.float64), arrivals.output_tokens)
    extra = arrivals.per_iteration * age
    # +0.5 block per request: the mean rounding-up of a partly filled last block.
    blocks = extra * ((arrivals.prompt_tokens + age / 2.0) / block_size + 0.5)
    return replace(
        projection, batch=projection.batch + extra, kv_blocks=projection.kv_blocks + blocks
    )
