"""Frozen copy of the BF-IO solver and lookahead before the speed-up (equivalence oracle).

The optimised :mod:`services.router.bfio` and :mod:`services.router.lookahead` must make
exactly the decisions this copy makes; ``test_bfio_equivalence`` checks that on random
instances. Test-only: nothing in ``services`` imports it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from services.router.placement import WorkerLoad

__all__ = ["reference_assign", "reference_base_from_arrays", "reference_base_trajectories"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def _column_top_two(loads: FloatArray) -> tuple[FloatArray, IntArray, FloatArray]:
    """Return each column's max, its row, and the max of the other rows."""
    if loads.shape[0] == 1:
        top = loads[0].copy()
        return top, np.zeros(loads.shape[1], dtype=np.int64), np.full_like(top, -np.inf)
    arg = np.argmax(loads, axis=0)
    cols = np.arange(loads.shape[1])
    top = loads[arg, cols]
    masked = loads.copy()
    masked[arg, cols] = -np.inf
    return top, arg.astype(np.int64), masked.max(axis=0)


def _others_max(loads: FloatArray) -> FloatArray:
    """Return a (G, T) array: for each row, the column max over the other rows."""
    top, arg, second = _column_top_two(loads)
    rows = np.arange(loads.shape[0])[:, None]
    return np.where(rows == arg[None, :], second[None, :], top[None, :])


def _best_worker(loads: FloatArray, added: FloatArray, open_rows: NDArray[np.bool_]) -> int:
    """Return the open worker on which adding ``added`` raises the objective least."""
    others = _others_max(loads)
    new_max = np.maximum(others, loads + added[None, :])
    cost = new_max.sum(axis=1)
    cost[~open_rows] = np.inf
    best = cost.min()
    tied = np.flatnonzero(cost <= best + 1e-9)
    if tied.size == 1:
        return int(tied[0])
    # Lexicographic tie-break (seed 003, Sec. 2.2): smaller resulting max, then lower load.
    keys = np.lexsort((loads[tied, 0], new_max[tied, 0]))
    return int(tied[keys[0]])


class _SortedPool:
    """Available prompts in sorted order, with nearest-available lookup.

    Taken positions are skipped by a linear scan from the bisection point. A decision
    takes about ``G*B/mean_output`` items (tens), so the runs scanned stay short; a
    union-find skip list would be faster at cold start but cannot cheaply un-take an item,
    which the exchange phase needs.
    """

    def __init__(self, prompts: FloatArray, members: IntArray) -> None:
        order = members[np.argsort(prompts[members])]
        self.index: list[int] = order.tolist()
        self.sizes: FloatArray = prompts[order]
        self.size: list[float] = self.sizes.tolist()
        self._taken = [False] * len(self.index)
        self._marked: list[int] = []

    def nearest(self, target: float) -> int:
        """Return the position of the available prompt nearest ``target`` (-1 if none)."""
        taken, n = self._taken, len(self.size)
        pos = bisect.bisect_left(self.size, target)
        right = pos
        while right < n and taken[right]:
            right += 1
        left = pos - 1
        while left >= 0 and taken[left]:
            left -= 1
        if right >= n:
            return left
        if left < 0:
            return right
        return left if target - self.size[left] <= self.size[right] - target else right

    def smallest(self) -> float:
        """Return the smallest available prompt (inf if none)."""
        pos = self.nearest(-math.inf)
        return self.size[pos] if pos >= 0 else math.inf

    def take(self, pos: int) -> None:
        """Mark a position taken."""
        self._taken[pos] = True
        self._marked.append(pos)

    def reset(self, taken: Sequence[int] = ()) -> None:
        """Make every position available, then take ``taken``."""
        for pos in self._marked:
            self._taken[pos] = False
        self._marked = []
        for pos in taken:
            self.take(pos)

    def release(self, pos: int) -> None:
        """Mark a position available again."""
        self._taken[pos] = False


def _greedy_fill(
    need: FloatArray, slots: IntArray, pool: _SortedPool
) -> tuple[list[list[int]], FloatArray]:
    """Fill each worker's slots toward its prompt-sum need; return picks and their sums."""
    count = need.shape[0]
    heap = [(-need[g] / slots[g], g) for g in range(count) if slots[g] > 0]
    heapq.heapify(heap)
    remaining = need.tolist()
    left = slots.tolist()
    picked: list[list[int]] = [[] for _ in range(count)]
    sums = [0.0] * count
    # Neediest worker per open slot first, so large prompts go where the deficit is largest.
    while heap:
        _, g = heapq.heappop(heap)
        pos = pool.nearest(remaining[g] / left[g])
        pool.take(pos)
        picked[g].append(pos)
        remaining[g] -= pool.size[pos]
        sums[g] += pool.size[pos]
        left[g] -= 1
        if left[g] > 0:
            heapq.heappush(heap, (-remaining[g] / left[g], g))
    return picked, np.array(sums)


def _fill_to_targets(
    loads: FloatArray,
    slots: IntArray,
    prompts: FloatArray,
    members: IntArray,
    swaps: int,
    levels: int,
) -> list[tuple[int, int]]:
    """Fill every open slot from ``members`` (more members than slots); return (item, worker)."""
    count, width = loads.shape
    drift = np.arange(width, dtype=np.float64)
    fixed = loads + slots[:, None] * drift[None, :]
    pool = _SortedPool(prompts, members)
    floor = fixed + (slots * pool.smallest())[:, None]
    gaps = floor.max(axis=0)[None, :] - fixed
    rank = min(width - 1, max(0, math.ceil(width / count) - 1))
    need = np.partition(gaps, rank, axis=1)[:, rank]
    # A common level above the lowest feasible one leaves room to balance with larger
    # prompts; the objective is flat in the level once balanced, so try a few and keep the
    # best by the exact objective (earliest, i.e. lowest max, on ties).
    step = 0.25 * pool.size[len(pool.size) // 2]
    best: tuple[float, list[list[int]], FloatArray] | None = None
    for level in range(max(1, levels)):
        pool.reset()
        picked, added = _greedy_fill(need + level * step * slots, slots, pool)
        value = _objective(fixed, added)
        if best is None or value < best[0] - 1e-9:
            best = (value, picked, added)
    assert best is not None
    _, picked, added = best
    pool.reset([p for items in picked for p in items])
    _exchange(fixed, added, picked, pool, rank, swaps)
    return [(pool.index[p], g) for g in range(count) for p in picked[g]]


def _objective(fixed: FloatArray, added: FloatArray) -> float:
    """Return the (IO) objective up to a constant: ``G * sum_h max - width * sum added``."""
    loads = fixed + added[:, None]
    return float(fixed.shape[0] * loads.max(axis=0).sum() - fixed.shape[1] * added.sum())


def _exchange(
    fixed: FloatArray,
    added: FloatArray,
    picked: list[list[int]],
    pool: _SortedPool,
    rank: int,
    rounds: int,
) -> None:
    """Improve ``picked`` in place by single swaps with the pool, accepting exact gains.

    Each round scores, for every picked item at once, the swap toward its worker's ideal
    prompt sum (nearest available prompt, found by one vectorised search), and applies the
    best strictly improving one.
    """
    count, width = fixed.shape
    rows = [g for g in range(count) if picked[g]]
    if not rows or rounds <= 0:
        return
    row_index = np.array(rows)
    pair_rows = np.array([g for g in rows for _ in picked[g]])
    pair_row_slot = np.searchsorted(row_index, pair_rows)
    old = np.array([p for g in rows for p in picked[g]])
    size = pool.sizes
    taken = np.zeros(size.shape[0], dtype=bool)
    taken[old] = True
    for _ in range(rounds):
        loads = fixed + added[:, None]
        top, arg, second = _column_top_two(loads)
        others = np.where(row_index[:, None] == arg[None, :], second[None, :], top[None, :])
        wish = np.partition(others - fixed[row_index], rank, axis=1)[:, rank] - added[row_index]
        pair_wish = wish[pair_row_slot]
        free = np.flatnonzero(~taken)
        if free.size == 0:
            break
        target = size[old] + pair_wish
        right = np.minimum(np.searchsorted(size[free], target), free.size - 1)
        left = np.maximum(right - 1, 0)
        nearer = np.abs(size[free[left]] - target) <= np.abs(size[free[right]] - target)
        new = free[np.where(nearer, left, right)]
        delta = np.where(np.abs(pair_wish) >= 1.0, size[new] - size[old], 0.0)
        pair_others = others[pair_row_slot]
        pair_loads = loads[pair_rows]
        # Exact change of G*sum_h(max) - sum_h(sum_g L) when one row moves by delta.
        now = np.maximum(pair_others, pair_loads).sum(axis=1)
        after = np.maximum(pair_others, pair_loads + delta[:, None]).sum(axis=1)
        gain = count * (now - after) + width * delta
        best = int(np.argmax(gain))
        if gain[best] <= 1e-9:
            break
        taken[new[best]], taken[old[best]] = True, False
        old[best] = new[best]
        added[pair_rows[best]] += delta[best]
    for g in rows:
        picked[g] = old[pair_rows == g].tolist()


def reference_assign(
    base: FloatArray,
    free_slots: IntArray,
    prompts: FloatArray,
    urgent_order: Sequence[int] = (),
    *,
    swap_rounds: int = 2,
    levels: int = 2,
) -> IntArray:
    """Solve one BF-IO decision approximately.

    Args:
        base: (G, H+1) predicted load of the running sequences (lookahead module).
        free_slots: (G,) slots each worker can fill now.
        prompts: (W,) prompt tokens of the waiting candidates.
        urgent_order: candidate indices that must be admitted first, least laxity first.
        swap_rounds: exchange rounds after the greedy fill (0 disables them).
        levels: common fill levels tried by the greedy (each costs one fill).

    Returns:
        (W,) worker index of each candidate, -1 when it stays queued.
    """
    width = base.shape[1]
    drift = np.arange(width, dtype=np.float64)
    loads = base.astype(np.float64, copy=True)
    slots = np.maximum(np.asarray(free_slots, dtype=np.int64), 0)
    assign = np.full(prompts.shape[0], -1, dtype=np.int64)
    for i in urgent_order:
        if slots.sum() == 0:
            return assign
        trajectory = prompts[i] + drift
        g = _best_worker(loads, trajectory, slots > 0)
        assign[i], loads[g] = g, loads[g] + trajectory
        slots[g] -= 1
    members = np.flatnonzero(assign < 0)
    capacity = int(slots.sum())
    if capacity == 0 or members.size == 0:
        return assign
    if members.size <= capacity:
        for i in members[np.argsort(-prompts[members], kind="stable")].tolist():
            trajectory = prompts[i] + drift
            g = _best_worker(loads, trajectory, slots > 0)
            assign[i], loads[g] = g, loads[g] + trajectory
            slots[g] -= 1
        return assign
    for item, g in _fill_to_targets(loads, slots, prompts, members, swap_rounds, levels):
        assign[item] = g
    return assign


def reference_base_trajectories(
    workers: Sequence[WorkerLoad], horizon: int, refill_tokens: float = 0.0
) -> FloatArray:
    """Return the (G, H+1) predicted load of each worker's running sequences.

    Sequences without a prediction are assumed to survive the window; sequences without a
    per-sequence KV length are assumed to hold the worker's mean.

    Args:
        workers: worker snapshots, in placement order.
        horizon: lookahead H in decode steps (0 = current loads only).
        refill_tokens: prompt size assumed to refill each slot freed in the window (0 = none).
    """
    count = len(workers)
    width = horizon + 1
    # Build flat arrays once so that all workers are binned by one bincount call: at G=64
    # and B=72 this is ~5k sequences and must cost well under the 1 ms decision budget.
    lengths = [w.running for w in workers]
    total = sum(lengths)
    if total == 0:
        return np.zeros((count, width), dtype=np.float64)
    remaining = np.fromiter(
        itertools.chain.from_iterable(
            w.predicted_remaining
            if len(w.predicted_remaining) == w.running
            else (width,) * w.running
            for w in workers
        ),
        dtype=np.int64,
        count=total,
    )
    kv = np.fromiter(
        itertools.chain.from_iterable(
            w.running_kv
            if len(w.running_kv) == w.running
            else (w.kv_tokens // max(1, w.running),) * w.running
            for w in workers
        ),
        dtype=np.int64,
        count=total,
    )
    owner = np.repeat(np.arange(count), lengths)
    # A sequence with r remaining tokens is alive for h < r: bin it at min(r, H+1), then a
    # reverse cumulative sum counts the sequences (and KV) alive at each h.
    finish = np.clip(remaining, 0, width) + owner * (width + 1)
    bins = count * (width + 1)
    kv_drop = np.bincount(finish, weights=kv.astype(np.float64), minlength=bins)
    seq_drop = np.bincount(finish, minlength=bins)
    return _loads_from_drops(
        kv_drop.reshape(count, width + 1), seq_drop.reshape(count, width + 1), refill_tokens
    )


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


def reference_base_from_arrays(
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
    finish = np.clip(remaining, 0, width) + (np.arange(count) * (width + 1))[:, None]
    finish, weights = finish[active], kv[active]
    bins = count * (width + 1)
    kv_drop = np.bincount(finish, weights=weights, minlength=bins).reshape(count, width + 1)
    seq_drop = np.bincount(finish, minlength=bins).reshape(count, width + 1)
    return _loads_from_drops(kv_drop, seq_drop, refill_tokens)
