"""Property tests: BF-IO's per-candidate placement (seed 003, Sec. 2.2) decides as the plain rule.

The fast placement loop (``bfio._place_in_turn``: no second column maxima, an incremental
column max, selection in Python) must pick exactly the worker the straightforward rule
below picks, for every candidate, including ties. Loads and prompts are drawn from a few
integer values (scaled, or divided by 3 for non-integer sums) so that equal costs, equal
resulting maxima and equal loads are common.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from services.router.bfio import BalanceFuturePlacer, balance_future_assign
from services.router.placement import Candidate, WorkerLoad
from tests.unit.router.bfio_reference import _fill_to_targets, reference_base_trajectories

FAST = settings(max_examples=200, deadline=None, database=None)


def _plain_best_worker(
    loads: NDArray[np.float64], added: NDArray[np.float64], slots: NDArray[np.int64]
) -> int:
    """The old rule, written out: each row's cost is ``sum_h max(max of other rows, own + added)``.

    The open worker of least cost wins; costs within 1e-9 of the least tie, and ties go to
    the smaller resulting max in column 0, then the lower current load in column 0, then
    the lower index.
    """
    count, width = loads.shape
    new_max = np.empty((count, width))
    for g in range(count):
        others = np.delete(loads, g, axis=0)
        other_max = others.max(axis=0) if count > 1 else np.full(width, -np.inf)
        new_max[g] = np.maximum(other_max, loads[g] + added)
    cost = new_max.sum(axis=1)
    open_rows = [g for g in range(count) if slots[g] > 0]
    best = min(cost[g] for g in open_rows)
    tied = [g for g in open_rows if cost[g] <= best + 1e-9]
    return min(tied, key=lambda g: (new_max[g, 0], loads[g, 0], g))


def _plain_assign(
    base: NDArray[np.float64],
    free: NDArray[np.int64],
    prompts: NDArray[np.float64],
    urgent: Sequence[int],
    swap_rounds: int,
    levels: int,
) -> NDArray[np.int64]:
    """Urgent first, then (pool fits) largest first, else the frozen fill-to-targets."""
    drift = np.arange(base.shape[1], dtype=np.float64)
    loads = base.astype(np.float64, copy=True)
    slots = np.maximum(free, 0).astype(np.int64)
    assign = np.full(prompts.shape[0], -1, dtype=np.int64)

    def place(i: int) -> None:
        trajectory = prompts[i] + drift
        g = _plain_best_worker(loads, trajectory, slots)
        assign[i] = g
        loads[g] += trajectory
        slots[g] -= 1

    for i in urgent:
        if slots.sum() == 0:
            return assign
        place(i)
    members = [i for i in range(prompts.shape[0]) if assign[i] < 0]
    if slots.sum() == 0 or not members:
        return assign
    if len(members) <= slots.sum():
        for i in sorted(members, key=lambda i: -prompts[i]):  # stable: ties in index order
            place(i)
        return assign
    fills = _fill_to_targets(loads, slots, prompts, np.array(members), swap_rounds, levels)
    for item, g in fills:
        assign[item] = g
    return assign


@st.composite
def instances(
    draw: st.DrawFn, negative: bool = False
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], list[int]]:
    """One decision: base (G, H+1), free slots, prompts and an urgent order."""
    count = draw(st.integers(1, 16))
    width = draw(st.sampled_from([1, 2, 8, 81]))
    levels = st.sampled_from([0, 1, 2, 5] + ([-3] if negative else []))
    base = np.array(
        draw(st.lists(levels, min_size=count * width, max_size=count * width)), dtype=np.float64
    ).reshape(count, width)
    scale = draw(st.sampled_from([1.0, 100.0, 1 / 3]))
    base *= scale
    free = np.array(draw(st.lists(st.integers(-1, 4), min_size=count, max_size=count)))
    sizes = [0, 1, 7, 100, 2000] + ([-50] if negative else [])
    prompts = np.array(draw(st.lists(st.sampled_from(sizes), max_size=14)), dtype=np.float64)
    prompts *= draw(st.sampled_from([1.0, 1 / 3]))
    order = draw(st.permutations(range(prompts.shape[0])))
    urgent = list(order[: draw(st.integers(0, min(3, prompts.shape[0])))])
    return base, free.astype(np.int64), prompts, urgent


@FAST
@given(case=instances(), swap_rounds=st.integers(0, 2), levels=st.integers(1, 2))
def test_assign_equals_the_plain_rule(
    case: tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], list[int]],
    swap_rounds: int,
    levels: int,
) -> None:
    """Test that balance_future_assign places every candidate where the plain rule does."""
    base, free, prompts, urgent = case
    expected = _plain_assign(base, free, prompts, urgent, swap_rounds, levels)
    got = balance_future_assign(base, free, prompts, urgent, swap_rounds=swap_rounds, levels=levels)
    assert got.tolist() == expected.tolist()


@FAST
@given(case=instances(negative=True), fortran=st.booleans())
def test_general_path_equals_the_plain_rule(
    case: tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], list[int]],
    fortran: bool,
) -> None:
    """Test that negative prompts or a Fortran-ordered base (the general path) also agree."""
    base, free, prompts, urgent = case
    if fortran:
        base = np.asfortranarray(base)
    expected = _plain_assign(base, free, prompts, urgent, 2, 2)
    assert balance_future_assign(base, free, prompts, urgent).tolist() == expected.tolist()


@st.composite
def rounds(draw: st.DrawFn) -> tuple[list[Candidate], list[WorkerLoad], int]:
    """One place() call: worker snapshots, candidates (some urgent) and a horizon."""
    count = draw(st.integers(1, 16))
    workers = []
    for g in range(count):
        remaining = draw(st.lists(st.sampled_from([1, 3, 40, 200]), max_size=6))
        kv = draw(st.sampled_from([0, 300, 1000])) * len(remaining)
        workers.append(
            WorkerLoad(
                worker_id=f"w{g}",
                free_slots=draw(st.integers(0, 3)),
                running=len(remaining),
                kv_tokens=kv,
                predicted_remaining=tuple(remaining),
            )
        )
    laxities = st.sampled_from([-1.0, 0.0, 0.05, 0.3, float("inf")])
    candidates = [
        Candidate(
            request_id=f"r{i}",
            prompt_tokens=draw(st.sampled_from([1, 50, 500, 3000])),
            predicted_output_tokens=100,
            laxity_s=draw(laxities),
        )
        for i in range(draw(st.integers(1, 10)))
    ]
    return candidates, workers, draw(st.sampled_from([0, 5, 80]))


@FAST
@given(case=rounds())
def test_place_equals_the_plain_rule(case: tuple[list[Candidate], list[WorkerLoad], int]) -> None:
    """Test that place() (Python urgent order, list output) admits and places as the plain rule."""
    candidates, workers, horizon = case
    placer = BalanceFuturePlacer(horizon=horizon)
    free = np.array([w.free_slots for w in workers], dtype=np.int64)
    expected: list[tuple[str, str]] = []
    if free.max() > 0:
        prompts = np.array([c.prompt_tokens for c in candidates], dtype=np.float64)
        laxity = np.array([c.laxity_s for c in candidates])
        urgent = np.flatnonzero(laxity <= placer.urgent_laxity_s)
        order = urgent[np.argsort(laxity[urgent], kind="stable")].tolist()
        base = reference_base_trajectories(workers, horizon)
        assign = _plain_assign(base, free, prompts, order, 2, 2)
        expected = [
            (candidates[i].request_id, workers[g].worker_id)
            for i, g in enumerate(assign.tolist())
            if g >= 0
        ]
    assert placer.place(candidates, workers) == expected
