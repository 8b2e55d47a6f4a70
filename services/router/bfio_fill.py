"""BF-IO's admission when the pool can fill every slot: targets, fill and exchange.

Steps 2-4 of :mod:`services.router.bfio` (seed 003, Sec. 2.2; the paper gives no solver,
this one is ours): each worker's new-request count is fixed, so only its added prompt sum
matters; :func:`fill_to_targets` fills the slots towards per-worker prompt targets and
:func:`exchange` improves the fill by single-item swaps with the pool, evaluated exactly
with the top-two column maxima (:func:`column_top_two`). :class:`Workspace` holds the
scratch arrays every decision of one fleet shape reuses.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Workspace",
    "column_top_two",
    "exchange",
    "fill_to_targets",
    "first_free",
    "greedy_fill",
    "objective",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class Workspace:
    """Scratch arrays reused across decisions of one fleet shape (no per-call (G, H+1) allocs)."""

    def __init__(self, count: int, width: int) -> None:
        self.shape = (count, width)
        self.drift: FloatArray = np.arange(width, dtype=np.float64)
        self.columns: IntArray = np.arange(width, dtype=np.int64)
        self.fixed: FloatArray = np.empty((count, width))
        self.loads: FloatArray = np.empty((count, width))

    @classmethod
    def for_shape(cls, workspace: Workspace | None, count: int, width: int) -> Workspace:
        """Return ``workspace`` if it fits ``(count, width)``, else a new one."""
        if workspace is not None and workspace.shape == (count, width):
            return workspace
        return cls(count, width)


def column_top_two(loads: FloatArray, columns: IntArray) -> tuple[FloatArray, IntArray, FloatArray]:
    """Return each column's max, its row, and the max of the other rows.

    ``loads`` is scratch: its maxima are masked in place and restored, which avoids a copy.
    """
    arg = np.argmax(loads, axis=0)
    top = loads[arg, columns]
    if loads.shape[0] == 1:
        return top, arg, np.full_like(top, -np.inf)
    loads[arg, columns] = -np.inf
    second = loads.max(axis=0)
    loads[arg, columns] = top
    return top, arg, second


def first_free(jump: dict[int, int], pos: int) -> int:
    """Return the first untaken position reached from ``pos`` by following ``jump``.

    ``jump`` maps each taken position to a neighbour in one direction; paths are
    compressed, so runs of taken equal-size prompts (the pool has many ties) are crossed
    in amortised O(1) instead of one step per taken item.
    """
    root = pos
    while root in jump:
        root = jump[root]
    while pos != root:
        jump[pos], pos = root, jump[pos]
    return root


def greedy_fill(
    need: list[float], slots: list[int], size: list[float]
) -> tuple[list[list[int]], list[float]]:
    """Fill each worker's slots toward its prompt-sum need from the sorted ``size`` list.

    Neediest worker per open slot first, so large prompts go where the deficit is largest;
    each takes the available prompt nearest its per-slot need (bisection, then skip
    pointers past taken positions on either side).
    Returns the positions picked per worker and each worker's added prompt sum.
    """
    count, n = len(need), len(size)
    to_right: dict[int, int] = {}
    to_left: dict[int, int] = {}
    heap = [(-need[g] / slots[g], g) for g in range(count) if slots[g] > 0]
    heapq.heapify(heap)
    remaining, left = list(need), list(slots)
    picked: list[list[int]] = [[] for _ in range(count)]
    sums = [0.0] * count
    bisect_left, heappop, heappush = bisect.bisect_left, heapq.heappop, heapq.heappush
    while heap:
        g = heappop(heap)[1]
        target = remaining[g] / left[g]
        right = bisect_left(size, target)
        below = right - 1
        if right in to_right:
            right = first_free(to_right, right)
        if below in to_left:
            below = first_free(to_left, below)
        if right >= n:
            pos = below
        elif below < 0 or target - size[below] > size[right] - target:
            pos = right
        else:
            pos = below
        to_right[pos], to_left[pos] = pos + 1, pos - 1
        picked[g].append(pos)
        remaining[g] -= size[pos]
        sums[g] += size[pos]
        left[g] -= 1
        if left[g] > 0:
            heappush(heap, (-remaining[g] / left[g], g))
    return picked, sums


def fill_to_targets(
    loads: FloatArray,
    slots: IntArray,
    prompts: FloatArray,
    members: IntArray,
    swaps: int,
    levels: int,
    work: Workspace,
) -> tuple[IntArray, IntArray]:
    """Fill every open slot from ``members`` (more members than slots); return items, workers."""
    count, width = loads.shape
    fixed = np.multiply(slots[:, None], work.drift[None, :], out=work.fixed)
    fixed += loads
    order = members[np.argsort(prompts[members])]
    sizes = prompts[order]
    size = sizes.tolist()
    floor = fixed + (slots * size[0])[:, None]
    gaps = floor.max(axis=0)[None, :] - fixed
    rank = min(width - 1, max(0, math.ceil(width / count) - 1))
    need = np.partition(gaps, rank, axis=1)[:, rank]
    # A common level above the lowest feasible one leaves room to balance with larger
    # prompts; the objective is flat in the level once balanced, so try a few and keep the
    # best by the exact objective (earliest, i.e. lowest max, on ties).
    step = 0.25 * size[len(size) // 2]
    slot_list = slots.tolist()
    best: tuple[float, list[list[int]], FloatArray] | None = None
    for level in range(max(1, levels)):
        picked, sums = greedy_fill((need + level * step * slots).tolist(), slot_list, size)
        added = np.array(sums)
        value = objective(fixed, added, work.loads)
        if best is None or value < best[0] - 1e-9:
            best = (value, picked, added)
    assert best is not None
    _, picked, added = best
    rows = [g for g in range(count) if picked[g]]
    pair_rows = np.array([g for g in rows for _ in picked[g]], dtype=np.int64)
    positions = np.array([p for g in rows for p in picked[g]], dtype=np.int64)
    if rows and swaps > 0:
        exchange(fixed, added, pair_rows, positions, sizes, rank, swaps, work)
    return order[positions], pair_rows


def objective(fixed: FloatArray, added: FloatArray, scratch: FloatArray) -> float:
    """Return the (IO) objective up to a constant: ``G * sum_h max - width * sum added``."""
    loads = np.add(fixed, added[:, None], out=scratch)
    return float(fixed.shape[0] * loads.max(axis=0).sum() - fixed.shape[1] * added.sum())


def exchange(
    fixed: FloatArray,
    added: FloatArray,
    pair_rows: IntArray,
    old: IntArray,
    size: FloatArray,
    rank: int,
    rounds: int,
    work: Workspace,
) -> None:
    """Improve the picks ``old`` (positions in ``size``) in place by single swaps with the pool.

    Each round scores, for every picked item at once, the swap toward its worker's ideal
    prompt sum (nearest available prompt, found by one vectorised search), and applies the
    best strictly improving one, evaluated exactly with the top-two column maxima.
    """
    count, width = fixed.shape
    # Everything is evaluated per picked item (most workers get one or two): a worker's
    # wish is recomputed for each of its items, with identical values, to save the
    # row-to-item gathers.
    fixed_pairs = fixed[pair_rows]
    taken = np.zeros(size.shape[0], dtype=bool)
    taken[old] = True
    for _ in range(rounds):
        loads = np.add(fixed, added[:, None], out=work.loads)
        top, arg, second = column_top_two(loads, work.columns)
        pair_others = np.where(pair_rows[:, None] == arg[None, :], second[None, :], top[None, :])
        pair_added = added[pair_rows]
        pair_wish = np.partition(pair_others - fixed_pairs, rank, axis=1)[:, rank] - pair_added
        free = np.flatnonzero(~taken)
        if free.size == 0:
            break
        free_size = size[free]
        old_size = size[old]
        target = old_size + pair_wish
        right = np.minimum(np.searchsorted(free_size, target), free.size - 1)
        left = np.maximum(right - 1, 0)
        nearer = np.abs(free_size[left] - target) <= np.abs(free_size[right] - target)
        new = free[np.where(nearer, left, right)]
        delta = np.where(np.abs(pair_wish) >= 1.0, size[new] - old_size, 0.0)
        pair_loads = fixed_pairs + pair_added[:, None]
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
