"""Tests for the static-key queue disciplines."""

from __future__ import annotations

import random

import pytest

from services.scheduler.laxity import laxity_s
from services.scheduler.queueing import (
    QueuedRequest,
    UnknownDisciplineError,
    make_discipline,
    pop_best,
)


def _req(
    rid: str, arrival: float, tokens: int, *, tbt: float = 1.0, ttft: float = 0.0
) -> QueuedRequest:
    return QueuedRequest(
        request_id=rid,
        arrival_s=arrival,
        prompt_tokens=10,
        predicted_output_tokens=tokens,
        ttft_s=ttft,
        tbt_s=tbt,
    )


def _drain(name: str, items: list[QueuedRequest], now: float = 100.0, **params: float) -> list[str]:
    queue = make_discipline(name, **params)
    for item in items:
        queue.push(item)
    out = []
    while (popped := queue.pop(now)) is not None:
        out.append(popped.request_id)
    return out


def test_fcfs_pops_in_arrival_order() -> None:
    """Test that FCFS serves requests by arrival time regardless of length."""
    items = [_req("b", 2.0, 1), _req("a", 1.0, 50), _req("c", 3.0, 5)]
    assert _drain("fcfs", items) == ["a", "b", "c"]


def test_pop_best_hands_over_at_most_the_slots_best_first() -> None:
    """Test the dispatch decision: up to ``slots`` requests by the discipline, the rest stay."""
    queue = make_discipline("srtf")
    for item in [_req("long", 0.0, 100), _req("mid", 1.0, 10), _req("short", 2.0, 3)]:
        queue.push(item)
    assert [q.request_id for q in pop_best(queue, 2, 0.0)] == ["short", "mid"]
    assert len(queue) == 1
    assert pop_best(queue, 0, 0.0) == []
    assert [q.request_id for q in pop_best(queue, 5, 0.0)] == ["long"]
    assert pop_best(queue, 5, 0.0) == []


def test_srtf_pops_shortest_remaining_first_and_breaks_ties_by_arrival() -> None:
    """Test that SRTF serves the fewest remaining tokens first, earlier arrival on ties."""
    items = [_req("long", 0.0, 100), _req("late", 2.0, 3), _req("early", 1.0, 3)]
    assert _drain("srtf", items) == ["early", "late", "long"]


def test_edf_orders_by_arrival_plus_alpha_latency() -> None:
    """Test that EDF serves the earliest t_arr + 1.4·Lat deadline first."""
    # deadlines: a 0+1.4*10=14, b 5+1.4*2=7.8, c 1+1.4*20=29
    items = [_req("a", 0.0, 10), _req("b", 5.0, 2), _req("c", 1.0, 20)]
    assert _drain("edf", items) == ["b", "a", "c"]


def test_llf_pop_matches_smallest_eq6_laxity() -> None:
    """Test that LLF pops the request whose FREESH Eq. 6 laxity is smallest right now."""
    rng = random.Random(7)
    items = [
        _req(f"r{i}", rng.uniform(0, 10), rng.randint(1, 400), tbt=0.03, ttft=0.1)
        for i in range(300)
    ]
    now = 12.0
    queue = make_discipline("llf")
    for item in items:
        queue.push(item)
    expected = sorted(
        items,
        key=lambda r: (laxity_s(r.arrival_s, 1.4 * r.latency_s, r.remaining_s, now), r.arrival_s),
    )
    assert [r.request_id for r in queue.ordered(now)] == [r.request_id for r in expected]
    assert queue.pop(now) is expected[0]


def test_llf_update_progress_reranks_the_request() -> None:
    """Test that progress lowers T_remain, raises laxity and so moves a request back."""
    queue = make_discipline("llf")
    queue.push(_req("a", 0.0, 10))
    queue.push(_req("b", 0.5, 10))
    assert queue.ordered(1.0)[0].request_id == "a"
    assert queue.update_progress("a", 5)
    assert queue.ordered(1.0)[0].request_id == "b"
    assert not queue.update_progress("missing", 1)


def test_ssjf_aging_lets_an_old_long_request_overtake_a_new_short_one() -> None:
    """Test that SSJF with aging promotes a long request after it waits long enough."""
    old_long = _req("old", 0.0, 500)
    new_short = _req("new", 60.0, 100)
    assert _drain("ssjf", [old_long, new_short], aging_tokens_per_s=10.0) == ["old", "new"]
    assert _drain("ssjf", [old_long, new_short], aging_tokens_per_s=1.0) == ["new", "old"]


def test_remove_takes_a_request_out_and_len_tracks_it() -> None:
    """Test that remove returns the request, skips it on pop and updates len."""
    queue = make_discipline("fcfs")
    for i in range(200):
        queue.push(_req(f"r{i}", float(i), 1))
    for i in range(0, 200, 2):
        assert queue.remove(f"r{i}") is not None
    assert queue.remove("r0") is None
    assert len(queue) == 100
    assert queue.pop(0.0) is not None
    assert queue.pop(0.0).request_id == "r3"  # type: ignore[union-attr]


def test_push_with_same_id_replaces_the_queued_request() -> None:
    """Test that re-pushing an id keeps one copy with the newest fields."""
    queue = make_discipline("srtf")
    queue.push(_req("a", 0.0, 100))
    queue.push(_req("b", 0.0, 50))
    queue.push(_req("a", 0.0, 10))
    assert len(queue) == 2
    assert [r.request_id for r in queue.ordered(0.0)] == ["a", "b"]


def test_make_discipline_rejects_unknown_names_and_parameters() -> None:
    """Test that unknown names and parameters fail loudly."""
    with pytest.raises(UnknownDisciplineError):
        make_discipline("lifo")
    with pytest.raises(TypeError):
        make_discipline("fcfs", alpha=1.4)
    assert make_discipline("LLF").name == "llf"
