"""The collector is held off in a load generator's window and the startup heap is frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from shared.gc_pauses import GC_ENV, collector_paused, freeze_startup_heap, observe_pauses


class Node:
    """A container that can sit in a reference cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()
    if was:
        gc.enable()


def test_no_cycle_is_collected_inside_the_window_and_every_one_is_after() -> None:
    """Test that cycles made in the window survive every collection trigger until it closes."""
    with collector_paused():
        assert not gc.isenabled()
        watched = _cycle()
        # Far more container allocations than generation 0's threshold.
        _ = [[i] for i in range(50_000)]
        assert watched() is not None
    assert gc.isenabled()
    assert watched() is None


def test_the_collector_stays_off_after_a_window_if_it_was_off_before() -> None:
    """Test that a window nested in a disabled collector leaves it disabled."""
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_nested_windows_leave_the_collector_to_the_outer_one() -> None:
    """Test that an inner window does not re-enable the collector inside the outer one."""
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_plain_mode_leaves_the_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test that GREENSERVE_GC=plain turns both measures off (A/B runs)."""
    monkeypatch.setenv(GC_ENV, "plain")
    with collector_paused():
        assert gc.isenabled()
    assert freeze_startup_heap() is False
    assert gc.get_freeze_count() == 0


def test_freezing_moves_the_live_heap_out_of_collections() -> None:
    """Test that objects alive at the freeze are no longer tracked by any generation."""
    gc.unfreeze()
    kept = [Node() for _ in range(1_000)]
    assert freeze_startup_heap() is True
    assert gc.get_freeze_count() >= len(kept)
    # Garbage made after the freeze is still collected.
    watched = _cycle()
    gc.collect()
    assert watched() is None


def test_every_collection_is_timed_into_the_pause_histogram_until_stopped() -> None:
    """Test that a full collection adds one generation-2 observation, and none once stopped."""

    def count() -> float:
        value = REGISTRY.get_sample_value(
            "greenserve_gc_pause_seconds_count", {"service": "test-gc", "generation": "2"}
        )
        return value or 0.0

    stop = observe_pauses("test-gc")
    try:
        before = count()
        gc.collect()
        gc.collect()
        assert count() == before + 2
    finally:
        stop()
    gc.collect()
    assert count() == before + 2
