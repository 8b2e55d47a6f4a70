"""Keep CPython's cyclic garbage collector out of latency measurements and request paths.

A full (generation 2) collection walks every container object the process holds; in a
process that has imported numpy, pydantic, OpenTelemetry, nats-py and redis-py that is a
pause of tens of milliseconds on the development host, during which the event loop runs
nothing. Two uses, measured in ``docs/performance.md`` (round 12):

* :func:`freeze_startup_heap` in every service once it has started: the objects that exist
  by then (modules, settings, compiled schemas) live as long as the process, so moving them
  out of the collector's reach (:func:`gc.freeze`) makes a later full collection walk only
  what the service allocated since: the same collections, shorter pauses.
* :func:`collector_paused` around a load generator's timed window: the client's own pause
  would stamp every completion that arrives during it late, and charge that to the control
  plane. A fleet of real clients does not pause together. The window is short (a bench
  step), reference counting still frees everything acyclic, and the cycles it leaves are
  collected when the window closes. Not for a service: its window never closes.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["GC_ENV", "collector_paused", "freeze_startup_heap"]

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
