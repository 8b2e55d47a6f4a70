"""Tests for BF-IO (seed 003): the fast solver, its exact references and the lookahead."""

from __future__ import annotations

import numpy as np
import pytest

from greenserve.bench.bfio.bfio_milp import allocation_objective, brute_force_io, solve_io_milp
from services.router.bfio import BalanceFuturePlacer, balance_future_assign
from services.router.lookahead import base_from_arrays, base_trajectories, imbalance_per_step
from services.router.placement import Candidate, WorkerLoad, make_placer


def _instance(
    rng: np.random.Generator, count: int, batch: int, pool: int, horizon: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kv = rng.integers(50, 2000, (count, batch)).astype(float)
    remaining = rng.geometric(1 / 60, (count, batch))
    active = rng.random((count, batch)) < 0.7
    base = base_from_arrays(kv, remaining, active, horizon)
    return base, (~active).sum(axis=1).astype(np.int64), rng.integers(20, 2500, pool).astype(float)


def test_lookahead_matches_a_per_sequence_computation() -> None:
    """Test that the binned trajectory equals summing each sequence's kv + h while alive."""
    rng = np.random.default_rng(1)
    workers = []
    expected = np.zeros((3, 11))
    for g in range(3):
        kv = rng.integers(1, 500, 5)
        rem = rng.integers(1, 15, 5)
        for k, r in zip(kv, rem, strict=True):
            for h in range(11):
                expected[g, h] += (k + h) if h < r else 0
        workers.append(
            WorkerLoad(
                worker_id=str(g),
                free_slots=0,
                running=5,
                kv_tokens=int(kv.sum()),
                predicted_remaining=tuple(rem.tolist()),
                running_kv=tuple(kv.tolist()),
            )
        )
    assert np.array_equal(base_trajectories(workers, 10), expected)


def test_imbalance_is_idle_work_at_the_barrier() -> None:
    """Test that Eq. 2 gives G*max - sum per step."""
    loads = np.array([[10.0, 4.0], [6.0, 4.0], [2.0, 7.0]])
    assert imbalance_per_step(loads).tolist() == [12.0, 6.0]


@pytest.mark.parametrize("seed", range(6))
def test_milp_reference_agrees_with_brute_force_on_tiny_instances(seed: int) -> None:
    """Test that the CBC MILP finds the brute-force optimum of (IO)."""
    rng = np.random.default_rng(seed)
    base, free, prompts = _instance(rng, count=2 + seed % 2, batch=3, pool=5, horizon=seed % 4)
    _, brute = brute_force_io(base, free, prompts)
    assign, milp = solve_io_milp(base, free, prompts)
    assert milp == pytest.approx(brute, rel=1e-9, abs=1e-6)
    assert (assign >= 0).sum() == min(prompts.size, free.sum())


def test_fast_solver_is_feasible_and_recovers_most_of_the_optimal_improvement() -> None:
    """Test that the fast solver fills every slot and closes most of FCFS's gap to the optimum."""
    rng = np.random.default_rng(42)
    missed = []
    for _ in range(6):
        base, free, prompts = _instance(rng, count=3, batch=4, pool=8, horizon=6)
        fast = balance_future_assign(base, free, prompts)
        assert (fast >= 0).sum() == min(prompts.size, free.sum())
        assert all((fast == g).sum() <= free[g] for g in range(3))
        _, optimum = solve_io_milp(base, free, prompts)
        value = allocation_objective(base, prompts, fast)
        fcfs = np.full(prompts.size, -1)
        order = [g for g in range(3) for _ in range(int(free[g]))][: prompts.size]
        fcfs[: len(order)] = order
        fcfs_value = allocation_objective(base, prompts, fcfs)
        assert value >= optimum - 1e-6
        missed.append((value - optimum) / max(fcfs_value - optimum, 1.0))
    assert float(np.mean(missed)) < 0.25


def test_cold_fill_respects_lemma_one_spread() -> None:
    """Test that filling an empty fleet leaves max - min load within the largest prompt."""
    rng = np.random.default_rng(7)
    prompts = rng.integers(1, 1000, 400).astype(float)
    base = np.zeros((8, 1))
    assign = balance_future_assign(base, np.full(8, 16, dtype=np.int64), prompts)
    loads = np.bincount(assign[assign >= 0], weights=prompts[assign >= 0], minlength=8)
    assert loads.max() - loads.min() <= prompts.max()


def test_bfio_beats_round_robin_on_a_skewed_instance() -> None:
    """Test that BF-IO balances a queue whose heavy requests all land on one worker under RR."""
    workers = [
        WorkerLoad(worker_id=f"w{g}", free_slots=4, running=0, kv_tokens=0) for g in range(4)
    ]
    candidates = [
        Candidate(
            request_id=str(i), prompt_tokens=4000 if i % 4 == 0 else 100, predicted_output_tokens=50
        )
        for i in range(16)
    ]
    prompt = {c.request_id: c.prompt_tokens for c in candidates}

    def spread(pairs: list[tuple[str, str]]) -> float:
        loads = {w.worker_id: 0.0 for w in workers}
        for request, worker in pairs:
            loads[worker] += prompt[request]
        return max(loads.values()) * len(loads) - sum(loads.values())

    rr = spread(make_placer("rr").place(candidates, workers))
    bfio = spread(make_placer("bfio", horizon=0).place(candidates, workers))
    assert bfio == 0.0
    assert rr > 10_000


def test_urgent_candidate_is_admitted_even_if_balance_prefers_others() -> None:
    """Test that the LLF closure admits a spent-laxity request into the only free slot."""
    workers = [WorkerLoad(worker_id="w0", free_slots=1, running=1, kv_tokens=100)]
    candidates = [
        Candidate(request_id="big", prompt_tokens=3000, predicted_output_tokens=9),
        Candidate(request_id="late", prompt_tokens=5, predicted_output_tokens=9, laxity_s=-1.0),
    ]
    placer = BalanceFuturePlacer(horizon=8, urgent_laxity_s=0.0)
    assert placer.place(candidates, workers) == [("late", "w0")]


def test_bfio_is_deterministic() -> None:
    """Test that identical inputs give identical BF-IO decisions."""
    rng = np.random.default_rng(3)
    base, free, prompts = _instance(rng, count=16, batch=12, pool=300, horizon=80)
    first = balance_future_assign(base, free, prompts)
    second = balance_future_assign(base, free, prompts)
    assert np.array_equal(first, second)


def test_refill_lookahead_adds_a_growing_request_to_each_freed_slot() -> None:
    """Test that with refills a slot freed at step f holds refill + (h - f) from then on."""
    kv = np.array([[100.0, 10.0]])
    remaining = np.array([[2, 9]])
    active = np.array([[True, True]])
    plain = base_from_arrays(kv, remaining, active, 4)
    refilled = base_from_arrays(kv, remaining, active, 4, refill_tokens=50.0)
    assert plain[0].tolist() == [110.0, 112.0, 12.0, 13.0, 14.0]
    assert (refilled - plain)[0].tolist() == [0.0, 0.0, 50.0, 51.0, 52.0]


@pytest.mark.parametrize("refill", [0.0, 1.0])
def test_object_and_array_paths_decide_the_same(refill: float) -> None:
    """Test that place() on snapshots equals assign_arrays() on the simulator's arrays."""
    rng = np.random.default_rng(8)
    kv = rng.integers(50, 2000, (5, 6)).astype(float)
    remaining = rng.integers(1, 40, (5, 6))
    active = rng.random((5, 6)) < 0.6
    workers = [
        WorkerLoad(
            worker_id=f"w{g}",
            free_slots=int((~active[g]).sum()),
            running=int(active[g].sum()),
            kv_tokens=int(kv[g][active[g]].sum()),
            predicted_remaining=tuple(remaining[g][active[g]].tolist()),
            running_kv=tuple(int(x) for x in kv[g][active[g]]),
        )
        for g in range(5)
    ]
    prompts = rng.integers(10, 3000, 40).astype(float)
    candidates = [
        Candidate(request_id=str(i), prompt_tokens=int(p), predicted_output_tokens=10)
        for i, p in enumerate(prompts)
    ]
    placer = make_placer("bfio", horizon=12, refill=refill)
    assert isinstance(placer, BalanceFuturePlacer)
    base = base_from_arrays(kv, remaining, active, 12, placer.refill_tokens(prompts))
    assign = placer.assign_arrays(base, (~active).sum(axis=1), prompts, np.full(40, np.inf))
    expected = [(str(i), f"w{assign[i]}") for i in np.flatnonzero(assign >= 0)]
    assert placer.place(candidates, workers) == expected
