"""Keep CPython's cyclic garbage collector out of latency measurements and request paths.

A full (generation 2) collection walks every container object the process holds; in a
process that has imported numpy, pydantic, OpenTelemetry, nats-py and redis-py that is a
pause of tens of milliseconds on the development host, during which the event loop runs
nothing. Two uses, measured in ``docs/performance.md`` ("Garbage collection"):

* :func:`freeze_startup_heap` in every service once it has started: the objects that exist
  by then (modules, settings, compiled schemas) live as long as the process, so moving them
  out of the collector's reach (:func:`gc.freeze`) makes a later full collection walk only
  what the service allocated since: the same collections, shorter pauses.
* :func:`collector_paused` around a load generator's timed window: the client's own pause
  would stamp every completion that arrives during it late, and charge that to the control
  plane. A fleet of real clients does not pause together. The window is short (a bench
  step), reference counting still frees everything acyclic, and the cycles it leaves are
  collected when the window closes. Not for a service: its window never closes.

:func:`observe_pauses` times every collection a service makes into
``greenserve_gc_pause_seconds``, so an operator reading a latency tail can rule pauses in or
out.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from shared.counters import GC_PAUSE_S

__all__ = ["GC_ENV", "collector_paused", "freeze_startup_heap", "observe_pauses"]

GC_ENV = "GREENSERVE_GC"
"""``plain`` leaves the collector as CPython sets it up, for A/B runs of this module."""


def _plain() -> bool:
    return os.environ.get(GC_ENV, "").lower() == "plain"


def freeze_startup_heap() -> bool:
    """Collect once, then exempt every surviving object from later collections.

    Returns whether it froze (``GREENSERVE_GC=plain`` turns it off).
    """
    if _plain():
        return False
    gc.collect()
    gc.freeze()
    return True


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block without cyclic collections; collect before and after it, outside it.

    Nesting is safe: an inner block finds the collector off and leaves it so.
    """
    if _plain() or not gc.isenabled():
        yield
        return
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def observe_pauses(service: str) -> Callable[[], None]:
    """Time every collection of this process into ``greenserve_gc_pause_seconds``.

    Returns the function that stops it. The callback runs inside the collection (the
    collector does not start another meanwhile) and only adds to pre-bound histogram
    children, whose locks are held around float additions that cannot start a collection.
    """
    children = [GC_PAUSE_S.labels(service, str(generation)) for generation in range(3)]
    started = 0.0

    def callback(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
        else:
            children[info["generation"]].observe(time.perf_counter() - started)

    gc.callbacks.append(callback)
    return lambda: gc.callbacks.remove(callback)
