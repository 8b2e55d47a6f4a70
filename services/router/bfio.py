"""BF-IO: balance-future placement with integer optimisation, solved fast (seed 003, Sec. 2.2).

Each decision solves the per-step program (IO) approximately: choose which waiting
requests to admit (``N = min(|W|, sum of free slots)``, every fillable slot is filled) and
on which worker, minimising ``sum_{h=0..H} Imb(k+h)`` with Imb from Eq. 2 over the
predicted loads of :mod:`services.router.lookahead`. The paper gives no solver; this one is
ours, and :mod:`greenserve.bench.bfio.bfio_milp` measures its optimality gap:

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

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from services.router.bfio_fill import Workspace, column_top_two, fill_to_targets
from services.router.lookahead import SnapshotCache, base_trajectories
from services.router.placement import DEFAULT_URGENT_LAXITY_S, Candidate, WorkerLoad

__all__ = ["BalanceFuturePlacer", "balance_future_assign"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def _best_worker(
    loads: FloatArray, added: FloatArray, open_rows: NDArray[np.bool_], columns: IntArray
) -> int:
    """Return the open worker on which adding ``added`` raises the objective least.

    The general form (any sign of ``added``); :func:`_place_in_turn` is the fast one.
    """
    top, arg, second = column_top_two(loads, columns)
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


def balance_future_assign(
    base: FloatArray,
    free_slots: IntArray,
    prompts: FloatArray,
    urgent_order: Sequence[int] = (),
    *,
    swap_rounds: int = 2,
    levels: int = 2,
    workspace: Workspace | None = None,
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
    work = Workspace.for_shape(workspace, *base.shape)
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
    items, workers = fill_to_targets(
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
        self._workspace: Workspace | None = None
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
        self._workspace = Workspace.for_shape(self._workspace, *base.shape)
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
        self._workspace = Workspace.for_shape(self._workspace, *base.shape)
        return balance_future_assign(
            base,
            free_slots,
            prompts,
            order,
            swap_rounds=self.swap_rounds,
            levels=self.levels,
            workspace=self._workspace,
        )
