"""Tests that the optimised BF-IO (seed 003) decides exactly as the frozen pre-speed-up copy."""

from __future__ import annotations

import numpy as np
import pytest

from services.router.bfio import BalanceFuturePlacer, balance_future_assign
from services.router.lookahead import SnapshotCache, base_from_arrays, base_trajectories
from services.router.placement import Candidate, WorkerLoad
from tests.unit.router.bfio_reference import (
    reference_assign,
    reference_base_from_arrays,
    reference_base_trajectories,
)


def _fleet(
    rng: np.random.Generator, count: int, batch: int, busy: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kv = rng.integers(20, 3000, (count, batch)).astype(float)
    remaining = rng.geometric(1 / 80, (count, batch)).astype(np.int64)
    active = rng.random((count, batch)) < busy
    return kv, remaining, active


def _pool(rng: np.random.Generator, size: int) -> np.ndarray:
    # Few distinct sizes, so the tie order among equal prompts is exercised too.
    return rng.choice(rng.integers(10, 4000, 40), size).astype(float)


@pytest.mark.parametrize("seed", range(40))
def test_array_path_assignments_equal_the_reference(seed: int) -> None:
    """Test that base_from_arrays and balance_future_assign reproduce the frozen copy exactly."""
    rng = np.random.default_rng(1000 + seed)
    count = int(rng.integers(1, 40))
    batch = int(rng.integers(2, 30))
    horizon = int(rng.choice([0, 1, 5, 20, 80]))
    kv, remaining, active = _fleet(rng, count, batch, float(rng.uniform(0.3, 0.98)))
    refill = float(rng.uniform(100, 2000)) if seed % 3 == 0 else 0.0
    base = base_from_arrays(kv, remaining, active, horizon, refill)
    assert np.array_equal(base, reference_base_from_arrays(kv, remaining, active, horizon, refill))
    free = (~active).sum(axis=1).astype(np.int64)
    prompts = _pool(rng, int(rng.integers(1, 3 * max(1, int(free.sum())) + 5)))
    urgent = rng.permutation(prompts.size)[: int(rng.integers(0, 4))].tolist() if seed % 4 else []
    rounds, levels = int(rng.integers(0, 4)), int(rng.integers(1, 4))
    fast = balance_future_assign(base, free, prompts, urgent, swap_rounds=rounds, levels=levels)
    slow = reference_assign(base, free, prompts, urgent, swap_rounds=rounds, levels=levels)
    assert np.array_equal(fast, slow)


@pytest.mark.parametrize("seed", range(6))
def test_placer_reuses_buffers_without_changing_decisions(seed: int) -> None:
    """Test that one placer deciding many steady G=64 steps in a row matches the frozen copy."""
    rng = np.random.default_rng(seed)
    placer = BalanceFuturePlacer(horizon=80)
    for _ in range(5):
        kv, remaining, active = _fleet(rng, 64, 72, 0.995)
        base = base_from_arrays(kv, remaining, active, 80)
        free = (~active).sum(axis=1).astype(np.int64)
        prompts = _pool(rng, 2000)
        laxity = np.full(prompts.size, np.inf)
        expected = reference_assign(
            reference_base_from_arrays(kv, remaining, active, 80), free, prompts
        )
        assert np.array_equal(placer.assign_arrays(base, free, prompts, laxity), expected)


@pytest.mark.parametrize("seed", range(8))
def test_object_path_equals_the_reference(seed: int) -> None:
    """Test that place() on snapshots, cached across calls, matches the frozen copy's choices."""
    rng = np.random.default_rng(50 + seed)
    placer = BalanceFuturePlacer(horizon=int(rng.choice([0, 12, 80])), refill=seed % 2 == 1)
    workers: list[WorkerLoad] = []
    for step in range(3):
        kv, remaining, active = _fleet(rng, 12, 8, 0.8)
        fresh = []
        for g in range(12):
            keep = step > 0 and g % 3 == 0  # some snapshots repeat: the cache must serve them
            fresh.append(workers[g] if keep else _worker(g, kv[g], remaining[g], active[g], seed))
        workers = fresh
        prompts = _pool(rng, int(rng.integers(1, 60)))
        laxity = np.where(rng.random(prompts.size) < 0.1, -1.0, np.inf)
        candidates = [
            Candidate(
                request_id=f"r{i}", prompt_tokens=int(p), predicted_output_tokens=9, laxity_s=x
            )
            for i, (p, x) in enumerate(zip(prompts, laxity, strict=True))
        ]
        refill = float(prompts.mean()) if placer.refill else 0.0
        base = reference_base_trajectories(workers, placer.horizon, refill)
        assert np.array_equal(base_trajectories(workers, placer.horizon, refill), base)
        urgent = np.flatnonzero(laxity <= placer.urgent_laxity_s)
        order = urgent[np.argsort(laxity[urgent], kind="stable")].tolist()
        free = np.array([w.free_slots for w in workers], dtype=np.int64)
        assign = reference_assign(base, free, prompts, order) if free.max() > 0 else None
        expected = (
            []
            if assign is None
            else [(f"r{i}", workers[int(assign[i])].worker_id) for i in np.flatnonzero(assign >= 0)]
        )
        assert placer.place(candidates, workers) == expected


def _worker(
    g: int, kv: np.ndarray, remaining: np.ndarray, active: np.ndarray, seed: int
) -> WorkerLoad:
    running = int(active.sum())
    # Every other seed leaves out per-sequence KV, exercising the mean-KV fallback.
    per_seq = seed % 2 == 0
    return WorkerLoad(
        worker_id=f"w{g}",
        free_slots=int((~active).sum()),
        running=running,
        kv_tokens=int(kv[active].sum()),
        predicted_remaining=tuple(int(r) for r in remaining[active]),
        running_kv=tuple(int(k) for k in kv[active]) if per_seq else (),
    )


def test_snapshot_cache_serves_unchanged_workers_and_rereads_changed_ones() -> None:
    """Test that cached histograms are reused only for unchanged workers, in any fleet order."""
    rng = np.random.default_rng(9)
    kv, remaining, active = _fleet(rng, 6, 10, 0.7)
    workers = [_worker(g, kv[g], remaining[g], active[g], 0) for g in range(6)]
    cache = SnapshotCache()
    first = base_trajectories(workers, 20, cache=cache)
    assert np.array_equal(first, reference_base_trajectories(workers, 20))
    moved = [workers[3], workers[0], workers[5]]
    bumped = WorkerLoad(
        worker_id="w1",
        free_slots=0,
        running=1,
        kv_tokens=7,
        predicted_remaining=(3,),
        running_kv=(7,),
    )
    again = base_trajectories([*moved, bumped], 20, cache=cache)
    assert np.array_equal(again, reference_base_trajectories([*moved, bumped], 20))
    assert (cache.hits, cache.misses) == (3, 7)
