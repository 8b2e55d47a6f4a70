"""Predicted per-worker decode workload over a lookahead window (BF-IO, seed 003, Sec. 2.2).

A running sequence with current KV length ``kv`` and ``r`` predicted remaining output
tokens contributes ``kv + h`` to its worker's load at lookahead step ``h`` while ``h < r``
and nothing afterwards (KV grows by one token per decode step, seed 003 Sec. 1.2). A newly
admitted request with prompt ``s`` contributes ``s + h`` over the whole window: the paper's
lookahead covers active requests only, so new ones are assumed alive (variant (a) of the
seed's parity notes).

The imbalance of Eq. 2 at step ``h`` is ``G * max_g L_g(h) - sum_g L_g(h)`` (idle work at
the barrier); the per-step program (IO) minimises its sum over ``h = 0..H``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from services.router.placement import WorkerLoad

__all__ = [
    "SnapshotCache",
    "base_from_arrays",
    "base_trajectories",
    "future_imbalance",
    "imbalance_per_step",
    "new_request_trajectory",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def new_request_trajectory(prompt_tokens: float, horizon: int) -> FloatArray:
    """Return the load a request admitted now adds at steps ``0..H`` (``s + h``)."""
    return prompt_tokens + np.arange(horizon + 1, dtype=np.float64)


_Snapshot = tuple[int, int, tuple[int, ...], tuple[int, ...]]

_EXACT_LIMIT = 2**53
"""Integers below this are exact in float64, so sums and products of them are too."""


def _snapshot(worker: WorkerLoad) -> _Snapshot:
    """Return the fields a worker's histogram depends on (immutable, unlike the dataclass)."""
    return (worker.running, worker.kv_tokens, worker.predicted_remaining, worker.running_kv)


class SnapshotCache:
    """Per-worker finish-step histograms, reused while a worker's snapshot is unchanged.

    Reading a worker's per-sequence tuples into arrays is the object path's main cost
    (~9k Python ints at G = 64, B = 72). A worker whose ``predicted_remaining``,
    ``running_kv``, ``running`` and ``kv_tokens`` are unchanged since the last call (the
    same tuple objects, or equal ones) reuses its histogram row; only changed workers are
    re-read. Rows hold histograms, not loads, so the refill option (which depends on the
    pool) is applied afresh each call and results are bit-identical to an uncached read.

    The live registry rebuilds every snapshot each round (remaining lengths move with
    time), so there the cache can never hit and its bookkeeping is pure cost. After
    ``idle_after`` calls in a row without a hit it goes dormant: calls bypass it, and
    every ``probe_every`` bypassed calls it is consulted twice (record, then check)
    to see whether snapshots have started to repeat. Dormancy changes cost only, never a
    result.
    """

    def __init__(self, *, idle_after: int = 8, probe_every: int = 1024) -> None:
        self.width = -1
        self.seen: dict[str, tuple[int, _Snapshot]] = {}
        self.kv_drop: FloatArray = np.zeros((0, 0))
        self.seq_drop: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.hits = 0
        self.misses = 0
        self.idle_after = idle_after
        self.probe_every = probe_every
        self.idle = 0
        """Consecutive consulted calls without a hit."""
        self.bypassed = 0
        self._pending: dict[str, tuple[int, _Snapshot]] | None = None

    def consulted(self) -> bool:
        """Return whether this call should use the cache (False while dormant)."""
        if self.idle < self.idle_after:
            return True
        self.bypassed += 1
        if self.bypassed < self.probe_every:
            return False
        # Probe: the next two calls are consulted (the first records, the second checks).
        self.bypassed, self.idle = 0, self.idle_after - 2
        return True

    def lookup(
        self, workers: Sequence[WorkerLoad], width: int
    ) -> tuple[FloatArray, IntArray] | None:
        """Return the (G, H+2) histograms if some worker is unchanged, else None.

        On None the caller computes all histograms itself and hands them to :meth:`store`;
        otherwise only the changed workers are re-read here.
        """
        if self.width != width:
            self.seen, self.width = {}, width
        snaps = [_snapshot(w) for w in workers]
        previous = [self.seen.get(w.worker_id) for w in workers]
        # Tuples compare by identity first, so an unchanged snapshot costs O(1) here.
        source = [
            -1 if p is None or p[1] != snap else p[0]
            for p, snap in zip(previous, snaps, strict=True)
        ]
        changed = [g for g, row in enumerate(source) if row < 0]
        self.hits += len(workers) - len(changed)
        self.misses += len(changed)
        # Only this call's workers are kept, so the cache never outgrows the fleet.
        pairs = zip(workers, snaps, strict=True)
        seen = {w.worker_id: (g, snap) for g, (w, snap) in enumerate(pairs)}
        if len(changed) == len(workers):
            self.idle += 1
            self._pending = seen
            return None
        self.idle = 0
        kv_drop, seq_drop = self.kv_drop[source], self.seq_drop[source]
        if changed:
            kv_new, seq_new = _histograms([workers[g] for g in changed], width)
            kv_drop[changed], seq_drop[changed] = kv_new, seq_new
        self.seen, self.kv_drop, self.seq_drop = seen, kv_drop, seq_drop
        return kv_drop, seq_drop

    def store(self, kv_drop: FloatArray, seq_drop: IntArray) -> None:
        """Keep the histograms of the workers of the last :meth:`lookup` that returned None."""
        if self._pending is not None:
            self.seen, self._pending = self._pending, None
            self.kv_drop, self.seq_drop = kv_drop, seq_drop

    def histograms(self, workers: Sequence[WorkerLoad], width: int) -> tuple[FloatArray, IntArray]:
        """Return the (G, H+2) histograms, re-reading only workers that changed."""
        found = self.lookup(workers, width)
        if found is None:
            found = _histograms(workers, width)
            self.store(*found)
        return found


def base_trajectories(
    workers: Sequence[WorkerLoad],
    horizon: int,
    refill_tokens: float = 0.0,
    cache: SnapshotCache | None = None,
) -> FloatArray:
    """Return the (G, H+1) predicted load of each worker's running sequences.

    Sequences without a prediction are assumed to survive the window; sequences without a
    per-sequence KV length are assumed to hold the worker's mean.

    Args:
        workers: worker snapshots, in placement order.
        horizon: lookahead H in decode steps (0 = current loads only).
        refill_tokens: prompt size assumed to refill each slot freed in the window (0 = none).
        cache: per-worker histograms kept between calls (the placer owns one).
    """
    count = len(workers)
    width = horizon + 1
    if sum(w.running for w in workers) == 0:
        return np.zeros((count, width), dtype=np.float64)
    found = None
    if cache is not None and cache.consulted():
        found = cache.lookup(workers, width)
        if found is None:
            computed = _mean_kv_loads(workers, width, refill_tokens, keep=True)
            found = _histograms(workers, width) if computed is None else computed[1]
            assert found is not None
            cache.store(*found)
            if computed is not None:
                return computed[0]
    elif (computed := _mean_kv_loads(workers, width, refill_tokens, keep=False)) is not None:
        return computed[0]
    if found is None:
        found = _histograms(workers, width)
    return _loads_from_drops(found[0], found[1], refill_tokens)


@functools.lru_cache(maxsize=32)
def _steps_and_offsets(count: int, width: int) -> tuple[FloatArray, IntArray]:
    """Return ``0..H`` as floats and each worker's first histogram bin (read-only)."""
    steps = np.arange(width, dtype=np.float64)
    offsets = np.arange(count, dtype=np.int64) * (width + 1)
    steps.flags.writeable = offsets.flags.writeable = False
    return steps, offsets


def _mean_kv_loads(
    workers: Sequence[WorkerLoad], width: int, refill_tokens: float, *, keep: bool
) -> tuple[FloatArray, tuple[FloatArray, IntArray] | None] | None:
    """Return the loads when no worker reports per-sequence KV (the live registry's case).

    Every sequence of worker g then holds ``c_g = kv_tokens // running``, so
    ``L_g(h) = alive_g(h) * (c_g + h)`` (seed 003, Sec. 2.2): one count histogram and
    one flat cumulative sum give ``alive``, with no per-sequence KV array, no weighted
    bincount and no reversed cumulative sums (10 numpy calls instead of 25). While
    ``(c_g + H + 1) * running_g < 2**53`` every value of either route is an integer
    that float64 holds exactly, so the loads are bit-identical to
    :func:`_loads_from_drops` over :func:`_histograms`; otherwise (or with a negative
    ``c_g``, or any per-sequence KV) this returns None and the caller takes that route.

    With ``keep`` it also returns the (G, H+2) histograms, for the snapshot cache.
    """
    chunks: list[tuple[int, ...]] = []
    mean_kv: list[int] = []
    lengths: list[int] = []
    ends: list[int] = []
    total = 0
    for w in workers:
        running = w.running
        if running > 0:
            if len(w.running_kv) == running:
                return None
            kv = w.kv_tokens // running
            if kv < 0 or (kv + width) * running >= _EXACT_LIMIT:
                return None
            remaining = w.predicted_remaining
            chunks.append(remaining if len(remaining) == running else (width,) * running)
            mean_kv.append(kv)
            lengths.append(running)
            total += running
        else:
            mean_kv.append(0)
            lengths.append(0)
        ends.append(total)
    count = len(workers)
    steps, offsets = _steps_and_offsets(count, width)
    finish = np.fromiter(itertools.chain.from_iterable(chunks), dtype=np.int64, count=total)
    np.maximum(finish, 0, out=finish)
    np.minimum(finish, width, out=finish)
    finish += np.repeat(offsets, lengths)
    drops = np.bincount(finish, minlength=count * (width + 1))
    # Flat running count: row g at column h holds every earlier row's sequences plus this
    # row's finished at <= h, so ``ends_g - csum[g, h]`` counts the ones alive at h.
    csum = np.add.accumulate(drops).reshape(count, width + 1)[:, :width]
    # One conversion for both per-worker columns; floats hold these integers exactly.
    ends_and_kv = np.array([ends, mean_kv], dtype=np.float64)[:, :, None]
    kv_column = ends_and_kv[1]
    loads = (ends_and_kv[0] - csum) * (kv_column + steps)
    if refill_tokens > 0.0:
        # As _loads_from_drops: the same integer arrays, then the same float operations.
        before = np.array([e - n for e, n in zip(ends, lengths, strict=True)], dtype=np.int64)
        finished = csum - before[:, None]
        grown = np.add.accumulate(finished, axis=1) - finished
        loads = loads + refill_tokens * finished + grown
    if not keep:
        return loads, None
    seq_drop = drops.reshape(count, width + 1)
    return loads, (seq_drop * kv_column, seq_drop)


def _per_sequence(
    workers: Sequence[WorkerLoad],
    lengths: list[int],
    total: int,
    values: Callable[[WorkerLoad], tuple[int, ...]],
    fallback: Callable[[WorkerLoad], int],
) -> IntArray:
    """Flatten one per-sequence field over all workers; ``fallback`` fills a worker without it.

    Reading Python ints is the cost here (~25 ns each), so a field that no worker reports
    (the live registry sends no ``running_kv``) is expanded with one ``np.repeat`` instead.
    """
    reported = [len(values(w)) == w.running > 0 for w in workers]
    if not any(reported):
        return np.repeat(np.array([fallback(w) for w in workers], dtype=np.int64), lengths)
    return np.fromiter(
        itertools.chain.from_iterable(
            values(w) if ok else (fallback(w),) * w.running
            for w, ok in zip(workers, reported, strict=True)
        ),
        dtype=np.int64,
        count=total,
    )


def _histograms(workers: Sequence[WorkerLoad], width: int) -> tuple[FloatArray, IntArray]:
    """Return (G, H+2) histograms of KV tokens and sequences by finish step, one bincount."""
    count = len(workers)
    lengths = [w.running for w in workers]
    total = sum(lengths)
    remaining = _per_sequence(
        workers, lengths, total, lambda w: w.predicted_remaining, lambda w: width
    )
    kv = _per_sequence(
        workers, lengths, total, lambda w: w.running_kv, lambda w: w.kv_tokens // max(1, w.running)
    )
    owner = np.repeat(np.arange(count), lengths)
    # A sequence with r remaining tokens is alive for h < r: bin it at min(r, H+1), then a
    # reverse cumulative sum counts the sequences (and KV) alive at each h.
    finish = np.minimum(np.maximum(remaining, 0), width) + owner * (width + 1)
    bins = count * (width + 1)
    kv_drop = np.bincount(finish, weights=kv.astype(np.float64), minlength=bins)
    seq_drop = np.bincount(finish, minlength=bins)
    shape = (count, width + 1)
    return np.asarray(kv_drop, dtype=np.float64).reshape(shape), seq_drop.reshape(shape)


def _loads_from_drops(
    kv_drop: NDArray[np.floating[Any]] | NDArray[np.integer[Any]],
    seq_drop: NDArray[np.integer[Any]],
    refill_tokens: float,
) -> FloatArray:
    """Turn (G, H+2) finish-step histograms into (G, H+1) predicted loads.

    With ``refill_tokens > 0`` every finished slot is assumed refilled at once by a request
    of that prompt size, which then grows by one token a step: in the overloaded regime the
    pool always has a request for a freed slot (seed 003, Def. 1). This is our option, not
    the paper's (its window ignores future admissions).
    """
    width = kv_drop.shape[1] - 1
    steps = np.arange(width, dtype=np.float64)
    kv_alive = np.cumsum(kv_drop[:, ::-1], axis=1)[:, ::-1][:, 1:]
    seq_alive = np.cumsum(seq_drop[:, ::-1], axis=1)[:, ::-1][:, 1:]
    loads = kv_alive + seq_alive * steps
    if refill_tokens > 0.0:
        finished = np.cumsum(seq_drop[:, :width], axis=1)
        # A slot freed at step f holds refill + (h - f) at h >= f: sum_f<=h (h - f) = cumsum.
        grown = np.cumsum(finished, axis=1) - finished
        loads = loads + refill_tokens * finished + grown
    return np.asarray(loads, dtype=np.float64)


def imbalance_per_step(loads: FloatArray) -> FloatArray:
    """Return Eq. 2's imbalance ``G * max - sum`` for each column (step) of a (G, T) array."""
    return np.asarray(loads.shape[0] * loads.max(axis=0) - loads.sum(axis=0), dtype=np.float64)


def future_imbalance(loads: FloatArray) -> float:
    """Return the (IO) objective: Eq. 2's imbalance summed over the lookahead window."""
    return float(imbalance_per_step(loads).sum())


def base_from_arrays(
    kv: FloatArray,
    remaining: NDArray[np.int64],
    active: NDArray[np.bool_],
    horizon: int,
    refill_tokens: float = 0.0,
) -> FloatArray:
    """Return the (G, H+1) predicted load from (G, B) slot arrays, as a simulator holds them.

    Args:
        kv: current KV tokens of each slot's sequence.
        remaining: predicted remaining output tokens of each slot's sequence.
        active: which slots hold a running sequence.
        horizon: lookahead H in decode steps.
        refill_tokens: prompt size assumed to refill each slot freed in the window (0 = none).
    """
    count = kv.shape[0]
    width = horizon + 1
    # Sequences alive for h < r: one (G, H+2) drop histogram, then a reverse cumulative sum.
    # np.minimum/np.maximum: same result as np.clip on integers, at a third of its overhead.
    finish = np.minimum(np.maximum(remaining, 0), width) + (np.arange(count) * (width + 1))[:, None]
    finish, weights = finish[active], kv[active]
    bins = count * (width + 1)
    kv_drop = np.bincount(finish, weights=weights, minlength=bins).reshape(count, width + 1)
    seq_drop = np.bincount(finish, minlength=bins).reshape(count, width + 1)
    return _loads_from_drops(kv_drop, seq_drop, refill_tokens)
