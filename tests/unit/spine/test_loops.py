"""Waiting on an event inside control loops (``shared.loops``)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from shared.loops import raise_if_cancelled, sleep_or_stop, wait_event


async def test_a_cancellation_that_meets_the_event_is_not_lost() -> None:
    """Test that a task cancelled in the same loop turn as its event is set ends cancelled.

    ``asyncio.wait_for`` returned normally there on Python 3.11 (cpython gh-86296): a router
    cancelled as its last dispatch woke it went on waiting for its next tick.
    """
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_event(event, 10.0))
    await asyncio.sleep(0.01)
    event.set()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_wait_event_reports_whether_the_event_was_set() -> None:
    """Test the timeout (False, after about the time asked) and a set event (True)."""
    event = asyncio.Event()
    assert not await wait_event(event, 0.01)
    event.set()
    assert await wait_event(event, 10.0)
    assert await sleep_or_stop(event, 10.0)


async def test_a_loop_ends_when_a_call_below_it_swallowed_its_cancellation() -> None:
    """Test that ``raise_if_cancelled`` ends a loop whose awaited call caught the
    cancellation (a ``TaskGroup`` waited forever for such a router record loop)."""
    rounds = 0

    async def swallowing_call() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # what a misbehaving library does
            await asyncio.sleep(10.0)

    async def loop() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            await swallowing_call()
            raise_if_cancelled()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2.0)
    assert rounds == 1
