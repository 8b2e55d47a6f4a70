"""Placement across models: each request goes to a worker of its own model, never another."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from services.router.placement import (
    PLACER_NAMES,
    Candidate,
    WorkerLoad,
    make_placer,
    place_by_model,
)

MODELS = ("llama-3-8b", "llama-2-13b")


def _workers(rng: random.Random, count: int) -> list[WorkerLoad]:
    return [
        WorkerLoad(
            worker_id=f"w{g}",
            free_slots=rng.randint(0, 6),
            running=0,
            kv_tokens=rng.randint(0, 5000),
            model=rng.choice(MODELS),
        )
        for g in range(count)
    ]


def _candidates(rng: random.Random, count: int, models: tuple[str, ...]) -> list[Candidate]:
    return [
        Candidate(
            request_id=f"r{i}",
            prompt_tokens=rng.randint(1, 2000),
            predicted_output_tokens=rng.randint(1, 300),
            laxity_s=0.0 if rng.random() < 0.2 else float("inf"),
            model=rng.choice(models),
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("name", PLACER_NAMES)
def test_every_pair_matches_the_models_and_respects_free_slots(name: str) -> None:
    """Test that every placer, wrapped, pairs requests only with workers of their model,
    within each worker's free slots, each request once."""
    rng = random.Random(7)
    placer = make_placer(name, seed=3)
    for _ in range(30):
        workers = _workers(rng, rng.randint(1, 8))
        candidates = _candidates(rng, rng.randint(0, 40), (*MODELS, "llama-2-70b"))
        pairs = place_by_model(placer, candidates, workers)
        model_of_worker = {w.worker_id: w.model for w in workers}
        model_of_request = {c.request_id: c.model for c in candidates}
        assert all(model_of_request[r] == model_of_worker[w] for r, w in pairs)
        per_worker = Counter(w for _, w in pairs)
        assert all(per_worker[w.worker_id] <= w.free_slots for w in workers)
        assert len({r for r, _ in pairs}) == len(pairs)
        assert not any(model_of_request[r] == "llama-2-70b" for r, _ in pairs)


def test_each_model_fills_its_own_workers_up_to_their_capacity() -> None:
    """Test that with room for both, every request is placed, and a model's overflow is not
    spilled onto the other model's free workers."""
    workers = [
        WorkerLoad(worker_id="wa", free_slots=2, running=0, kv_tokens=0, model=MODELS[0]),
        WorkerLoad(worker_id="wb", free_slots=10, running=0, kv_tokens=0, model=MODELS[1]),
    ]
    candidates = [
        Candidate(request_id=f"a{i}", prompt_tokens=10, predicted_output_tokens=10, model=MODELS[0])
        for i in range(5)
    ] + [
        Candidate(request_id=f"b{i}", prompt_tokens=10, predicted_output_tokens=10, model=MODELS[1])
        for i in range(3)
    ]
    pairs = place_by_model(make_placer("least-loaded"), candidates, workers)
    on = Counter(w for _, w in pairs)
    assert on == {"wa": 2, "wb": 3}
    assert {r for r, w in pairs if w == "wb"} == {"b0", "b1", "b2"}


def test_a_model_without_workers_places_nothing() -> None:
    """Test that requests for a model no worker serves stay queued (no pair at all)."""
    workers = [WorkerLoad(worker_id="a0", free_slots=4, running=0, kv_tokens=0, model=MODELS[0])]
    candidates = [
        Candidate(request_id="x", prompt_tokens=1, predicted_output_tokens=1, model=MODELS[1])
    ]
    assert place_by_model(make_placer("rr"), candidates, workers) == []
