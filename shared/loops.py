"""Control loops that outlive outages.

A loop iteration is a boundary like a message handler: if NATS is reconnecting or Redis is
restarting, the iteration fails, is logged and counted, and the loop tries again after a
capped, growing backoff — the service never exits because a dependency blinked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from shared.counters import ERRORS

__all__ = ["raise_if_cancelled", "retry", "run_periodic", "sleep_or_stop", "wait_event"]

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 2.0
"""Longest wait between failing iterations: recovery within a few seconds of an outage."""


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; return whether it is set.

    Not ``asyncio.wait_for``: on Python 3.11 it loses a cancellation that arrives just as
    the event is set (cpython gh-86296, fixed in 3.12), and a loop around it then goes on
    instead of ending; a router cancelled as a sender's wake-up fired slept out its hour-long
    test tick that way. ``asyncio.timeout`` keeps the cancellation.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, seconds)):
            await event.wait()
    return event.is_set()


def raise_if_cancelled() -> None:
    """Raise ``CancelledError`` if this task was asked to cancel and is still running.

    A library that catches the cancellation somewhere below a loop (seen with the router's
    Redis record loop under a cancelling ``TaskGroup``: the group then waits for it forever)
    leaves the request pending on the task (``Task.cancelling``); a loop that checks here
    once per iteration ends as asked anyway.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` or until ``stop`` is set; return whether it was set."""
    return await wait_event(stop, seconds)


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


async def retry(
    call: Callable[[], Awaitable[_T]],
    errors: type[BaseException] | tuple[type[BaseException], ...],
    *,
    within_s: float,
    first_backoff_s: float,
    max_backoff_s: float,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> _T:
    """``call()`` again while it raises one of ``errors``, waiting ``first_backoff_s``
    doubling to ``max_backoff_s`` between tries, for as long as the next wait would end
    within ``within_s`` of the first try; then the last error is raised.

    For calls that are safe to repeat: a JetStream publish with the same ``Nats-Msg-Id``,
    a connection that was refused, idempotent set-up. ``on_retry(error, wait_s)`` hears of
    each retry before its wait (to log or count it).
    """
    deadline = time.monotonic() + within_s
    backoff = first_backoff_s
    while True:
        try:
            return await call()
        except errors as exc:
            if time.monotonic() + backoff > deadline:
                raise
            if on_retry is not None:
                on_retry(exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, max_backoff_s)
