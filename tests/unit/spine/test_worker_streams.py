"""Unit tests of the worker's stream bookkeeping."""

from __future__ import annotations

from proto.messages import ClassifiedRequest
from services.worker.streams import StreamBook
from tests.factories import classified_request


def _classified(rid: str, out: int) -> ClassifiedRequest:
    return classified_request(rid, output_tokens=out)


def test_first_token_is_flushed_at_once_and_later_tokens_are_coalesced() -> None:
    """Test that TTFT never waits for the coalescing window but later tokens do."""
    book = StreamBook("w", flush_s=0.1)
    book.open(_classified("a", 5), accepted_at=0.0)
    chunks, _ = book.on_iteration(("a",), (), (), 1.0, at=1.00)
    assert [c.first_index for _, c in chunks] == [0]
    chunks, _ = book.on_iteration(("a",), (), (), 1.0, at=1.01)
    assert chunks == []
    chunks, _ = book.on_iteration(("a",), (), (), 1.0, at=1.12)
    assert [(c.first_index, len(c.token_times)) for _, c in chunks] == [(1, 2)]


def test_completion_carries_every_token_and_the_energy_share() -> None:
    """Test that the last chunk and the completion account for every token exactly once."""
    book = StreamBook("w", flush_s=10.0)
    book.open(_classified("a", 3), accepted_at=0.5)
    book.open(_classified("b", 1), accepted_at=0.5)
    sent: list[int] = []
    done = []
    for i, (emitted, finished) in enumerate([(("a", "b"), ("b",)), (("a",), ()), (("a",), ("a",))]):
        chunks, completions = book.on_iteration(emitted, finished, (), 2.0, at=1.0 + i)
        sent += [len(c.token_times) for _, c in chunks if c.request_id == "a"]
        done += [c for _, c in completions]
    assert sum(sent) == 3
    by_id = {c.request_id: c for c in done}
    assert by_id["a"].output_tokens == 3
    assert by_id["b"].output_tokens == 1
    assert by_id["a"].energy_j + by_id["b"].energy_j == 6.0
    assert by_id["a"].first_token_at <= by_id["a"].finished_at
    assert len(book) == 0


def test_completion_co2_is_its_energy_at_the_region_s_intensity_or_unknown() -> None:
    """Test that a finished request's CO2 is its energy share priced at the intensity the
    heartbeat last read (400 g/kWh: 3.6e6 J → 400 g), and ``None`` before any forecast."""
    book = StreamBook("w", flush_s=10.0)
    book.open(_classified("a", 1), accepted_at=0.0)
    _, completions = book.on_iteration(("a",), ("a",), (), 9.0, at=1.0)
    assert completions[0][1].co2_g is None
    book.intensity_g_per_kwh = 400.0
    book.open(_classified("b", 1), accepted_at=0.0)
    _, completions = book.on_iteration(("b",), ("b",), (), 3.6e6, at=2.0)
    assert completions[0][1].energy_j == 3.6e6
    assert completions[0][1].co2_g == 400.0
