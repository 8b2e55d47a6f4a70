"""throttLL'eM's batch and KV projection over future iterations (seed 002 §1, Eq. 1–2).

Assume no new arrivals; every request on the instance produces one token per iteration
until it reaches its predicted length. At future iteration j (0 = the next one):

    B[j]  = #{ i : j < r_i }                                   (batch size)
    KV[j] = Σ_{i : j < r_i} ceil((c_i + j) / N)                (Eq. 1, Eq. 2)

where r_i is request i's predicted remaining tokens, c_i its current context (prompt plus
generated tokens) and N the KV block size. Queued requests are projected as if admitted
now (their prefill is not modelled, as in the paper).

:func:`with_arrivals` is our extension (throttLL'eM assumes no new arrivals): it adds the
requests expected to arrive during the horizon at an observed rate, which keep the batch
from draining as the Eq. 1 projection assumes (see ``docs/dvfs.md``).

The horizon can run to thousands of iterations, and the IPS model costs ~0.2 µs per tree and
row, so the horizon is cut into at most ``max_segments`` equal segments, each evaluated at
its midpoint and standing for all of its iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from services.dvfs.controller import RequestState

__all__ = ["ExpectedArrivals", "Projection", "project", "with_arrivals"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Projection:
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


def project(
    requests: Sequence[RequestState], *, block_size: int, max_segments: int = 32
) -> Projection:
    """Return the Eq. 1–2 projection of ``requests`` (at least one).

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
    context = np.fromiter(
        (r.prompt_tokens + r.generated_tokens for r in requests), np.int64, len(requests)
    )
    horizon = int(remaining.max())
    segments = min(max_segments, horizon)
    edges = np.linspace(0, horizon, segments + 1).round().astype(np.int64)
    iterations = np.diff(edges)
    midpoints = (edges[:-1] + edges[1:] - 1) // 2
    active = midpoints[:, None] < remaining[None, :]
    blocks = np.ceil((context[None, :] + midpoints[:, None]) / block_size)
    return Projection(
        batch=active.sum(axis=1).astype(np.float64),
        kv_blocks=(blocks * active).sum(axis=1).astype(np.float64),
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
    projection: Projection, arrivals: ExpectedArrivals, *, block_size: int
) -> Projection:
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
