"""BF-IO: balance-future placement with integer optimisation, solved fast (seed 003, Sec. 2.2).

Each decision solves the per-step program (IO) approximately: choose which waiting
requests to admit (``N = min(|W|, sum of free slots)``, every fillable slot is filled) and
on which worker, minimising ``sum_{h=0..H} Imb(k+h)`` with Imb from Eq. 2 over the
predicted loads of :mod:`services.router.lookahead`. The paper gives no solver; this one is
ours, and :mod:`services.router.bfio_milp` measures its optimality gap:

1. *Urgent first.* Candidates whose laxity is at or below ``urgent_laxity_s`` are admitted
   before anything else, least laxity first, each on the worker whose exact marginal
   objective is smallest. This joins LLF (FREESH Eq. 6) to BF-IO, whose size-skewed
   admission would otherwise starve small prompts (the paper leaves fairness open).
2. *Targets.* When the pool can fill every slot, each worker's new-request count is fixed,
   so only its added prompt sum ``P_g`` matters and the objective is convex piecewise
   linear in ``P_g``. Its minimiser, others fixed, puts worker g above the others' max at
   about ``(H+1)/G`` of the window's steps: a quantile of its gap to the column max.
3. *Fill.* Slots are filled one at a time, neediest worker (per open slot) first, with the
   available prompt nearest its per-slot need (a sorted pool with skip pointers).
4. *Exchange.* A few rounds of single-item swaps with the pool, evaluated exactly with the
   top-two column maxima, mirror the exchange argument of the paper's Lemmas 1-2.
When the pool is smaller than the free slots every candidate is admitted and only placement
is chosen: largest prompt first, each on the worker with the smallest exact marginal cost.
Ties go lexicographically to the smaller resulting max load, then the lower current load.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from services.router.lookahead import SnapshotCache, base_trajectories
from services.router.placement import DEFAULT_URGENT_LAXITY_S, Candidate, WorkerLoad

__all__ = ["BalanceFuturePlacer", "balance_future_assign"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class _Workspace:
    """Scratch arrays reused across decisions of one fleet shape (no per-call (G, H+1) allocs)."""

    def __init__(self, count: int, width: int) -> None:
        self.shape = (count, width)
        self.drift: FloatArray = np.arange(width, dtype=np.float64)
        self.columns: IntArray = np.arange(width, dtype=np.int64)
        self.fixed: FloatArray = np.empty((count, width))
        self.loads: FloatArray = np.empty((count, width))

    @classmethod
    def for_shape(cls, workspace: _Workspace | None, count: int, width: int) -> _Workspace:
        """Return ``workspace`` if it fits ``(count, width)``, else a new one."""
        if workspace is not None and workspace.shape == (count, width):
            return workspace
        return cls(count, width)


def _column_top_two(
    loads: FloatArray, columns: IntArray
) -> tuple[FloatArray, IntArray, FloatArray]:
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


def _best_worker(
    loads: FloatArray, added: FloatArray, open_rows: NDArray[np.bool_], columns: IntArray
) -> int:
    """Return the open worker on which adding ``added`` raises the objective least.

    The general form (any sign of ``added``); :func:`_place_in_turn` is the fast one.
    """
    top, arg, second = _column_top_two(loads, columns)
    rows = np.arange(loads.shape[0])[:, None]
    others = np.where(rows == arg[None, :], second[None, :], top[None, :])
    new_max = np.maximum(others, loads + added[None, :])
    return _pick(new_max.sum(axis=1), new_max, loads, open_rows)


def _pick(
    cost: FloatArray, new_max: FloatArray, loads: FloatArray, open_rows: NDArray[np.bool_]
) -> int:
    """Return the open row of least ``cost``, ties broken lexicographically (clobbers ``cost``)."""
    cost[~open_rows] = np.inf
    best = cost.min()
    tied = np.flatnonzero(cost <= best + 1e-9)
    if tied.size == 1:
        return int(tied[0])
    # Lexicographic tie-break (seed 003, Sec. 2.2): smaller resulting max, then lower load.
    keys = np.lexsort((loads[tied, 0], new_max[tied, 0]))
    return int(tied[keys[0]])


def _place_in_turn(
    loads: FloatArray,
    slots: list[int],
    trajectories: FloatArray,
    scratch: FloatArray,
) -> list[int]:
    """Place one request per row of ``trajectories`` in turn, each on its cheapest open worker.

    Same choices as :func:`_best_worker` called per request (seed 003, Sec. 2.2), with five
    numpy calls per request instead of about fifteen; at G <= 16 their fixed overhead was
    the whole cost:

    * *No second maxima.* With ``added >= 0`` the row holding a column's max keeps it, so
      ``max(others_max, L_g + added) == max(col_max, L_g + added)`` for every row, exactly
      (float addition of a non-negative number never decreases). The caller checks that
      every trajectory is non-negative.
    * *Incremental column max.* Only the chosen row changes, and only upward, so the
      column max is updated from that row instead of recomputed.
    * *Selection in Python* on ``G`` costs (``tolist``), with the same ``<= best + 1e-9``
      tie window and lexicographic key; the costs are the same numpy row sums of the same
      C-ordered (G, H+1) values as before, so they are bit-identical. A non-finite cost
      (inf/NaN loads) falls back to :func:`_pick`.

    ``loads`` and ``slots`` are updated in place; ``scratch`` is a C-ordered buffer of
    ``loads``' shape. Stops early when no slot is left; returns the chosen worker per row.
    """
    count = len(slots)
    open_rows = [g for g in range(count) if slots[g] > 0]
    top = loads.max(axis=0)
    rows = list(loads)
    add, maximum, row_sums = np.add, np.maximum, np.add.reduce
    isfinite = math.isfinite
    chosen: list[int] = []
    for trajectory in trajectories:
        if not open_rows:
            break
        add(loads, trajectory, out=scratch)
        maximum(scratch, top, out=scratch)
        sums = row_sums(scratch, axis=1)
        cost = sums.tolist()
        if isfinite(sum(cost)):
            best = min([cost[g] for g in open_rows])
            limit = best + 1e-9
            tied = [g for g in open_rows if cost[g] <= limit]
            if len(tied) == 1:
                g = tied[0]
            else:
                new_first = scratch[:, 0].tolist()
                old_first = loads[:, 0].tolist()
                g = min(tied, key=lambda r: (new_first[r], old_first[r]))
        else:
            mask = np.zeros(count, dtype=bool)
            mask[open_rows] = True
            g = _pick(sums, scratch, loads, mask)
        chosen.append(g)
        row = rows[g]
        add(row, trajectory, out=row)
        maximum(top, row, out=top)
        slots[g] -= 1
        if slots[g] == 0:
            open_rows.remove(g)
    return chosen


def _first_free(jump: dict[int, int], pos: int) -> int:
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


def _greedy_fill(
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
            right = _first_free(to_right, right)
        if below in to_left:
            below = _first_free(to_left, below)
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


def _fill_to_targets(
    loads: FloatArray,
    slots: IntArray,
    prompts: FloatArray,
    members: IntArray,
    swaps: int,
    levels: int,
    work: _Workspace,
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
        picked, sums = _greedy_fill((need + level * step * slots).tolist(), slot_list, size)
        added = np.array(sums)
        value = _objective(fixed, added, work.loads)
        if best is None or value < best[0] - 1e-9:
            best = (value, picked, added)
    assert best is not None
    _, picked, added = best
    rows = [g for g in range(count) if picked[g]]
    pair_rows = np.array([g for g in rows for _ in picked[g]], dtype=np.int64)
    positions = np.array([p for g in rows for p in picked[g]], dtype=np.int64)
    if rows and swaps > 0:
        _exchange(fixed, added, pair_rows, positions, sizes, rank, swaps, work)
    return order[positions], pair_rows


def _objective(fixed: FloatArray, added: FloatArray, scratch: FloatArray) -> float:
    """Return the (IO) objective up to a constant: ``G * sum_h max - width * sum added``."""
    loads = np.add(fixed, added[:, None], out=scratch)
    return float(fixed.shape[0] * loads.max(axis=0).sum() - fixed.shape[1] * added.sum())


def _exchange(
    fixed: FloatArray,
    added: FloatArray,
    pair_rows: IntArray,
    old: IntArray,
    size: FloatArray,
    rank: int,
    rounds: int,
    work: _Workspace,
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
        top, arg, second = _column_top_two(loads, work.columns)
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


def balance_future_assign(
    base: FloatArray,
    free_slots: IntArray,
    prompts: FloatArray,
    urgent_order: Sequence[int] = (),
    *,
    swap_rounds: int = 2,
    levels: int = 2,
    workspace: _Workspace | None = None,
) -> IntArray:
    """Solve one BF-IO decision approximately.

    Args:
        base: (G, H+1) predicted load of the running sequences (lookahead module).
        free_slots: (G,) slots each worker can fill now.
        prompts: (W,) prompt tokens of the waiting candidates.
        urgent_order: candidate indices that must be admitted first, least laxity first.
        swap_rounds: exchange rounds after the greedy fill (0 disables them).
        levels: common fill levels tried by the greedy (each costs one fill).
        workspace: scratch buffers from an earlier call (the placer keeps one).

    Returns:
        (W,) worker index of each candidate, -1 when it stays queued.
    """
    work = _Workspace.for_shape(workspace, *base.shape)
    slot_list = [s if s > 0 else 0 for s in np.asarray(free_slots, dtype=np.int64).tolist()]
    capacity = sum(slot_list)
    count = prompts.shape[0]
    assign = np.full(count, -1, dtype=np.int64)
    # Urgent candidates are placed until the slots run out.
    urgent = list(urgent_order)[:capacity]
    if capacity == 0 or (count == 0 and not urgent):
        return assign
    left = capacity - len(urgent)
    taken = {i + count if i < 0 else i for i in urgent}
    # The pool fits the free slots: every candidate is admitted, largest prompt first.
    small = 0 < count - len(taken) <= left
    if small:
        values = prompts.tolist()
        members = [i for i in range(count) if i not in taken] if taken else list(range(count))
        sizes = [values[i] for i in urgent]
        regular = prompts.dtype.kind in "fi" and all(v >= 0 for v in values)
        if regular:
            # A stable reverse sort equals numpy's stable argsort of -prompts here (no NaN),
            # at a fraction of its cost for a few candidates.
            members.sort(key=values.__getitem__, reverse=True)
        else:
            members = [members[k] for k in np.argsort(-prompts[members], kind="stable").tolist()]
        sequence = urgent + members
        sizes += [values[i] for i in members]
    else:
        sequence = urgent
        sizes = prompts[urgent].tolist() if urgent else []
        regular = prompts.dtype.kind in "fi" and all(v >= 0 for v in sizes)
    # Only the urgent and small-pool paths add to the loads; the fill path just reads them.
    loads = base.astype(np.float64, copy=bool(sequence))
    if sequence:
        # One outer sum gives each request's ``s + h`` exactly as ``prompts[i] + drift`` did.
        trajectories = np.add.outer(prompts[sequence] if not regular else sizes, work.drift)
        if regular and loads.flags.c_contiguous:
            chosen = _place_in_turn(loads, slot_list, trajectories, work.loads)
        else:
            chosen = _place_general(loads, slot_list, trajectories, work.columns)
        for i, g in zip(sequence, chosen, strict=True):
            assign[i] = g
    if small or left == 0 or count == len(taken):
        return assign
    waiting = np.ones(count, dtype=bool)
    waiting[urgent] = False
    members_array = np.flatnonzero(waiting) if urgent else np.arange(count)
    slots = np.array(slot_list, dtype=np.int64)
    items, workers = _fill_to_targets(
        loads, slots, prompts, members_array, swap_rounds, levels, work
    )
    assign[items] = workers
    return assign


def _place_general(
    loads: FloatArray, slots: list[int], trajectories: FloatArray, columns: IntArray
) -> list[int]:
    """:func:`_place_in_turn` for any trajectories (negative or NaN prompts) and layout."""
    open_slots = np.array(slots, dtype=np.int64)
    chosen: list[int] = []
    for trajectory in trajectories:
        g = _best_worker(loads, trajectory, open_slots > 0, columns)
        chosen.append(g)
        loads[g] = loads[g] + trajectory
        open_slots[g] -= 1
    slots[:] = open_slots.tolist()
    return chosen


class BalanceFuturePlacer:
    """BF-IO placer (seed 003) behind the :class:`~services.router.placement.Placer` API."""

    name = "bfio"

    def __init__(
        self,
        *,
        horizon: int = 80,
        urgent_laxity_s: float = DEFAULT_URGENT_LAXITY_S,
        swap_rounds: int = 2,
        levels: int = 2,
        refill: bool = False,
    ) -> None:
        """Create the placer.

        Args:
            horizon: lookahead H in decode steps (the paper runs 0 and 80).
            urgent_laxity_s: candidates at or below this laxity are admitted first.
            swap_rounds: exchange rounds after the greedy fill.
            levels: common fill levels the greedy tries.
            refill: assume slots freed inside the window are refilled at once by a
                pool-mean prompt (our option; the paper's window ignores refills).
        """
        if horizon < 0:
            raise ValueError(f"horizon must be >= 0, got {horizon}")
        self.horizon = horizon
        self.urgent_laxity_s = urgent_laxity_s
        self.swap_rounds = swap_rounds
        self.levels = levels
        self.refill = refill
        # Decision-to-decision state that never changes a decision, only its cost.
        self._workspace: _Workspace | None = None
        self._snapshots = SnapshotCache()

    def place(
        self, candidates: Sequence[Candidate], workers: Sequence[WorkerLoad]
    ) -> list[tuple[str, str]]:
        """Return the BF-IO admissions and placements for this step."""
        if not candidates or not workers:
            return []
        free = [w.free_slots for w in workers]
        if max(free) <= 0:
            return []
        # List comprehensions read ~2k attributes faster than fromiter over attrgetter.
        prompts = np.array([c.prompt_tokens for c in candidates], dtype=np.float64)
        base = base_trajectories(
            workers, self.horizon, self.refill_tokens(prompts), cache=self._snapshots
        )
        # Urgent ones as assign_arrays finds them (float64 laxity, stable sort), in Python:
        # a few candidates cost less than the numpy calls.
        threshold = self.urgent_laxity_s
        laxity = [float(c.laxity_s) for c in candidates]
        urgent = [i for i, slack in enumerate(laxity) if slack <= threshold]
        if len(urgent) > 1:
            urgent.sort(key=laxity.__getitem__)
        self._workspace = _Workspace.for_shape(self._workspace, *base.shape)
        assign = balance_future_assign(
            base,
            np.array(free, dtype=np.int64),
            prompts,
            urgent,
            swap_rounds=self.swap_rounds,
            levels=self.levels,
            workspace=self._workspace,
        ).tolist()
        return [
            (candidates[i].request_id, workers[g].worker_id) for i, g in enumerate(assign) if g >= 0
        ]

    def refill_tokens(self, prompts: FloatArray) -> float:
        """Return the prompt size assumed to refill freed slots (0 when refills are off)."""
        return float(prompts.mean()) if self.refill and prompts.size else 0.0

    def assign_arrays(
        self, base: FloatArray, free_slots: IntArray, prompts: FloatArray, laxity: FloatArray
    ) -> IntArray:
        """Decide from arrays (the decode simulator's path; no Python objects per request).

        Args:
            base: (G, H+1) predicted load of running sequences (``base_from_arrays``).
            free_slots: (G,) open slots.
            prompts: (W,) prompt tokens of waiting candidates, in queue order.
            laxity: (W,) scheduler laxity in seconds (inf when unknown).

        Returns:
            (W,) worker index per candidate, -1 when it stays queued.
        """
        urgent = np.flatnonzero(laxity <= self.urgent_laxity_s)
        order = urgent[np.argsort(laxity[urgent], kind="stable")].tolist() if urgent.size else []
        self._workspace = _Workspace.for_shape(self._workspace, *base.shape)
        return balance_future_assign(
            base,
            free_slots,
            prompts,
            order,
            swap_rounds=self.swap_rounds,
            levels=self.levels,
            workspace=self._workspace,
        )
