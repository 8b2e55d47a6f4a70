"""Tests for the router placement API and its baselines (BF-IO seed 003, Sec. 2.4)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from services.router.placement import (
    PLACER_NAMES,
    Candidate,
    WorkerLoad,
    make_placer,
)


def _fleet(rng: random.Random, count: int, batch: int) -> list[WorkerLoad]:
    workers = []
    for g in range(count):
        running = rng.randint(0, batch)
        kv = tuple(rng.randint(10, 3000) for _ in range(running))
        workers.append(
            WorkerLoad(
                worker_id=f"w{g}",
                free_slots=batch - running,
                running=running,
                kv_tokens=sum(kv),
                predicted_remaining=tuple(rng.randint(1, 300) for _ in range(running)),
                running_kv=kv,
            )
        )
    return workers


def _pool(rng: random.Random, size: int, urgent: int = 0) -> list[Candidate]:
    return [
        Candidate(
            request_id=f"r{i}",
            prompt_tokens=rng.randint(1, 4000),
            predicted_output_tokens=rng.randint(1, 500),
            laxity_s=0.0 if i >= size - urgent else float("inf"),
        )
        for i in range(size)
    ]


@pytest.mark.parametrize("name", PLACER_NAMES)
def test_placer_never_exceeds_free_slots_or_repeats_a_request(name: str) -> None:
    """Test that no placer gives a worker more than its free slots or places a request twice."""
    rng = random.Random(11)
    for trial in range(25):
        workers = _fleet(rng, rng.randint(1, 9), rng.randint(1, 8))
        candidates = _pool(rng, rng.randint(0, 40))
        pairs = make_placer(name, seed=trial).place(candidates, workers)
        free = {w.worker_id: w.free_slots for w in workers}
        per_worker = Counter(worker for _, worker in pairs)
        assert all(per_worker[w] <= free[w] for w in per_worker)
        assert len({request for request, _ in pairs}) == len(pairs)
        assert {request for request, _ in pairs} <= {c.request_id for c in candidates}
        assert len(pairs) == min(len(candidates), sum(free.values()))


@pytest.mark.parametrize("name", PLACER_NAMES)
def test_placer_always_admits_urgent_requests_first(name: str) -> None:
    """Test that candidates whose laxity is spent are admitted even when slots are scarce."""
    rng = random.Random(5)
    workers = _fleet(rng, 6, 6)
    for w in workers:
        w.free_slots = 1
    candidates = _pool(rng, 60, urgent=4)
    pairs = make_placer(name).place(candidates, workers)
    admitted = {request for request, _ in pairs}
    assert {"r56", "r57", "r58", "r59"} <= admitted


def test_fcfs_fill_fills_workers_in_index_order_from_the_queue_head() -> None:
    """Test that FCFS fill follows the paper's Algorithm 2 exactly."""
    workers = [
        WorkerLoad(worker_id="a", free_slots=2, running=0, kv_tokens=0),
        WorkerLoad(worker_id="b", free_slots=0, running=3, kv_tokens=10),
        WorkerLoad(worker_id="c", free_slots=1, running=0, kv_tokens=0),
    ]
    candidates = [
        Candidate(request_id=str(i), prompt_tokens=10 * (i + 1), predicted_output_tokens=5)
        for i in range(5)
    ]
    pairs = make_placer("fcfs-fill").place(candidates, workers)
    assert pairs == [("0", "a"), ("1", "a"), ("2", "c")]


def test_round_robin_cursor_persists_across_calls() -> None:
    """Test that round robin continues from where the previous decision stopped."""
    workers = [
        WorkerLoad(worker_id=f"w{g}", free_slots=5, running=0, kv_tokens=0) for g in range(3)
    ]
    placer = make_placer("rr")
    first = placer.place(
        [Candidate(request_id="x", prompt_tokens=1, predicted_output_tokens=1)], workers
    )
    second = placer.place(
        [Candidate(request_id="y", prompt_tokens=1, predicted_output_tokens=1)], workers
    )
    assert (first[0][1], second[0][1]) == ("w0", "w1")


def test_jsq_and_least_loaded_pick_different_workers_when_counts_mislead() -> None:
    """Test that JSQ follows request counts while least-loaded follows KV tokens."""
    workers = [
        WorkerLoad(worker_id="few-heavy", free_slots=4, running=1, kv_tokens=9000),
        WorkerLoad(worker_id="many-light", free_slots=4, running=3, kv_tokens=300),
    ]
    candidate = [Candidate(request_id="r", prompt_tokens=100, predicted_output_tokens=10)]
    assert make_placer("jsq").place(candidate, workers) == [("r", "few-heavy")]
    assert make_placer("least-loaded").place(candidate, workers) == [("r", "many-light")]


@pytest.mark.parametrize("name", PLACER_NAMES)
def test_placer_is_deterministic_given_a_seed(name: str) -> None:
    """Test that two placers built with the same seed decide identically."""
    rng = random.Random(3)
    workers = _fleet(rng, 8, 6)
    candidates = _pool(rng, 50)
    first = make_placer(name, seed=9).place(candidates, workers)
    second = make_placer(name, seed=9).place(candidates, workers)
    assert first == second


def test_make_placer_rejects_an_unknown_name() -> None:
    """Test that an unknown policy name fails with the list of valid names."""
    with pytest.raises(ValueError, match="least-loaded"):
        make_placer("random")
