"""Control loops that outlive outages.

A loop iteration is a boundary like a message handler: if NATS is reconnecting or Redis is
restarting, the iteration fails, is logged and counted, and the loop tries again after a
capped, growing backoff — the service never exits because a dependency blinked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from shared.counters import ERRORS

__all__ = ["run_periodic", "sleep_or_stop"]

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 2.0
"""Longest wait between failing iterations: recovery within a few seconds of an outage."""


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` or until ``stop`` is set; return whether it was set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))
    return stop.is_set()


async def run_periodic(
    stop: asyncio.Event,
    period_s: Callable[[], float] | float,
    body: Callable[[], Awaitable[None]],
    *,
    service: str,
    name: str,
) -> None:
    """Call ``body`` every ``period_s`` (wall) until ``stop``; failures back off and retry."""
    failures = 0
    while not stop.is_set():
        try:
            await body()
            failures = 0
        except Exception:  # loop boundary: count, log once per streak, retry
            failures += 1
            ERRORS.labels(service, f"loop_{name}").inc()
            if failures == 1:
                logger.exception("%s loop %s failed; retrying", service, name)
            await sleep_or_stop(stop, min(MAX_BACKOFF_S, 0.1 * 2**failures))
            continue
        period = period_s() if callable(period_s) else period_s
        await sleep_or_stop(stop, period)
