"""The router's placement step: laxity at the round's time, one model at a time, the rest back."""

from __future__ import annotations

import pytest

from services.router.placement import WorkerLoad, make_placer
from services.router.placement_step import (
    PlacementRound,
    Pulled,
    lookahead_remaining_tokens,
    step,
)


def _pulled(rid: str, *, deadline_s: float, remaining_s: float = 1.0, model: str = "") -> Pulled:
    return Pulled(
        request_id=rid,
        prompt_tokens=100,
        predicted_output_tokens=50,
        deadline_s=deadline_s,
        remaining_s=remaining_s,
        model=model,
    )


def _worker(wid: str, free: int, *, model: str = "") -> WorkerLoad:
    return WorkerLoad(worker_id=wid, free_slots=free, running=0, kv_tokens=0, model=model)


def test_a_request_out_of_laxity_at_the_rounds_time_takes_the_last_slot() -> None:
    """Test that laxity is deadline − now − remaining at ``now_s``: the same request is
    urgent in a late round and not in an early one, and an urgent one goes first."""
    relaxed = _pulled("relaxed", deadline_s=100.0)
    tight = _pulled("tight", deadline_s=12.0, remaining_s=2.0)
    workers = [_worker("w0", 1)]
    early = step(
        make_placer("fcfs-fill"),
        PlacementRound(now_s=0.0, pulled=[relaxed, tight], workers=workers),
    )
    assert early.placed == {"relaxed": "w0"}
    assert early.unplaced == ["tight"]
    # At t = 10 the tight one has 12 − 10 − 2 = 0 s left: below the urgent threshold.
    late = step(
        make_placer("fcfs-fill"),
        PlacementRound(now_s=10.0, pulled=[relaxed, tight], workers=workers),
    )
    assert late.placed == {"tight": "w0"}
    assert late.unplaced == ["relaxed"]


def test_unplaced_come_back_in_pulled_order_and_models_stay_apart() -> None:
    """Test that a request goes only to a worker of its model, and that what finds no room
    (or no worker of its model) is returned in the scheduler's order."""
    pulled = [
        _pulled("a1", deadline_s=50.0, model="a"),
        _pulled("b1", deadline_s=50.0, model="b"),
        _pulled("a2", deadline_s=50.0, model="a"),
        _pulled("c1", deadline_s=50.0, model="c"),
        _pulled("a3", deadline_s=50.0, model="a"),
    ]
    workers = [_worker("wa", 2, model="a"), _worker("wb", 3, model="b")]
    decision = step(
        make_placer("least-loaded"), PlacementRound(now_s=0.0, pulled=pulled, workers=workers)
    )
    assert decision.placed == {"a1": "wa", "a2": "wa", "b1": "wb"}
    assert decision.unplaced == ["c1", "a3"]


def test_the_placers_state_carries_from_round_to_round() -> None:
    """Test that round robin's cursor, the step's state, moves on between rounds."""
    placer = make_placer("rr")
    workers = [_worker("w0", 4), _worker("w1", 4)]
    first = step(
        placer, PlacementRound(now_s=0.0, pulled=[_pulled("r0", deadline_s=9.0)], workers=workers)
    )
    second = step(
        placer, PlacementRound(now_s=0.0, pulled=[_pulled("r1", deadline_s=9.0)], workers=workers)
    )
    assert first.placed == {"r0": "w0"}
    assert second.placed == {"r1": "w1"}


@pytest.mark.parametrize(
    ("predicted", "elapsed_s", "tbt_s", "expected"),
    [
        (100, 0.0, 0.05, 100),
        (100, 1.0, 0.05, 80),  # 20 tokens at 50 ms each
        (100, 1.04, 0.05, 80),  # a token not yet whole is not counted
        (100, 60.0, 0.05, 1),  # past its prediction it still holds its slot
        (100, 0.0105, 0.0, 90),  # no profile: floored at 1 ms a token, not a division by zero
    ],
)
def test_lookahead_remaining_tokens(
    predicted: int, elapsed_s: float, tbt_s: float, expected: int
) -> None:
    """Test the BF-IO lookahead estimate the router and the simulator both use."""
    assert lookahead_remaining_tokens(predicted, 5.0, tbt_s, 5.0 + elapsed_s) == expected
