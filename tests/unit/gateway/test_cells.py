"""Which cell a gateway sends a request to (``services/gateway/cells.py``)."""

from __future__ import annotations

import pytest

from services.gateway.cells import CellPicker
from shared.config import Settings


def _names(picker: CellPicker, picks: int, now: float = 0.0) -> list[str]:
    out = []
    for _ in range(picks):
        cell = picker.pick(now)
        assert cell is not None
        out.append(cell.subjects.prefix)
    return out


def test_an_idle_fleet_is_used_in_turn() -> None:
    """Test that requests that end before the next one starts go round the cells."""
    picker = CellPicker(["a", "b", "c"])
    seen = []
    for _ in range(6):
        cell = picker.pick(0.0)
        assert cell is not None
        seen.append(cell.subjects.prefix)
        picker.release(cell)
    assert seen == ["a", "b", "c", "a", "b", "c"]


def test_the_cell_with_fewest_requests_in_flight_takes_the_next() -> None:
    """Test join-the-shortest-queue: a cell whose requests finished takes the next ones."""
    picker = CellPicker(["a", "b"])
    assert _names(picker, 4) == ["a", "b", "a", "b"]
    a = picker.cells[0]
    picker.release(a)
    picker.release(a)  # a has none in flight, b two
    assert _names(picker, 2) == ["a", "a"]
    assert [c.in_flight for c in picker.cells] == [2, 2]


def test_a_cell_marked_down_is_skipped_until_its_retry_time() -> None:
    """Test that a cell without an ingress stream is left out for retry_s, then tried again."""
    picker = CellPicker(["a", "b"], retry_s=5.0)
    a = picker.cells[0]
    picker.mark_down(a, now=10.0)
    assert _names(picker, 3, now=11.0) == ["b", "b", "b"]
    for cell in picker.cells:
        cell.in_flight = 0
    assert _names(picker, 2, now=15.0) == ["a", "b"]


def test_when_every_cell_is_down_the_least_recently_failed_is_tried() -> None:
    """Test that a fleet all marked down is still tried (oldest failure first), and that a
    request that already failed on every cell gets none."""
    picker = CellPicker(["a", "b"], retry_s=5.0)
    a, b = picker.cells
    picker.mark_down(b, now=1.0)
    picker.mark_down(a, now=2.0)
    assert picker.pick(3.0) is b
    assert picker.pick(3.0, exclude=[a, b]) is None
    assert picker.pick(3.0, exclude=[b]) is a


def test_release_never_counts_below_zero() -> None:
    """Test that a release without a pick (a double release) leaves the count at zero."""
    picker = CellPicker(["a"])
    picker.release(picker.cells[0])
    assert picker.cells[0].in_flight == 0


@pytest.mark.parametrize(
    ("namespaces", "message"),
    [([], "at least one cell"), (["a", "a"], "named twice"), (["a", "b c"], "prefix")],
)
def test_bad_cell_lists_are_refused(namespaces: list[str], message: str) -> None:
    """Test that no cells, a repeated cell and a namespace that is no subject token are refused."""
    with pytest.raises(ValueError, match=message):
        CellPicker(namespaces)


@pytest.mark.parametrize(
    ("cells", "message"), [(["gs", "gs"], "named twice"), (["gs", "x.y"], "not namespaces")]
)
def test_the_setting_refuses_bad_cell_lists(cells: list[str], message: str) -> None:
    """Test that ``gateway.cells`` is checked when the settings load, not at the first request."""
    with pytest.raises(ValueError, match=message):
        Settings(gateway={"cells": cells})
