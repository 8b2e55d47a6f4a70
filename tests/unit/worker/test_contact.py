"""A worker's contact with the stack: NATS connected and the store answering lately."""

from __future__ import annotations

import asyncio
import time

from redis.exceptions import ConnectionError as RedisConnectionError

from services.worker.contact import ContactWatch


class _Store:
    """A store stand-in whose PING answers or fails."""

    def __init__(self) -> None:
        self.up = True
        self.pings = 0

    async def ping(self) -> bool:
        self.pings += 1
        if not self.up:
            raise RedisConnectionError("unreachable")
        return True


async def test_contact_needs_nats_and_a_store_that_answered_lately() -> None:
    """Test that contact is lost when the store stops answering (no heartbeat, PINGs fail)
    though NATS stays connected, and when NATS drops; that a PING brings it back without a
    heartbeat; and that only round trips made while NATS was connected confirm contact."""
    store = _Store()
    nats = [True]
    watch = ContactWatch(
        store,  # type: ignore[arg-type]
        lambda: nats[0],
        lost_after_s=0.3,
        beat_period_s=0.1,
    )
    probe = asyncio.create_task(watch.probe())
    try:
        assert watch.in_contact()
        store.up = False
        await asyncio.sleep(0.6)
        assert not watch.in_contact()  # NATS is connected: the store decides
        assert store.pings > 0
        confirmed = watch.confirmed_at
        store.up = True
        await asyncio.sleep(0.3)
        assert watch.in_contact()  # a PING got through, no heartbeat needed
        assert watch.confirmed_at > confirmed
        nats[0] = False
        assert not watch.in_contact()
        before = watch.confirmed_at
        watch.store_seen(time.time())  # a heartbeat while NATS is down confirms nothing
        assert watch.confirmed_at == before
    finally:
        probe.cancel()


def test_a_reconnect_between_two_looks_counts_as_contact_lost_once() -> None:
    """Test that a NATS reconnect the watch did not see as a disconnection (nats-py moved
    to another cluster node between two looks) makes the next look report lost contact,
    once, so the outbox re-sends what the dying node may have swallowed."""
    reconnects = [0]
    watch = ContactWatch(
        _Store(),  # type: ignore[arg-type]
        lambda: True,
        lost_after_s=10.0,
        beat_period_s=1.0,
        nats_reconnects=lambda: reconnects[0],
    )
    assert watch.in_contact()
    reconnects[0] = 1
    assert not watch.in_contact()
    assert watch.in_contact()
    reconnects[0] = 3
    assert not watch.in_contact()
    assert watch.in_contact()


async def test_a_silent_nats_connection_is_lost_contact_and_confirms_nothing_after_it() -> None:
    """Test that when NATS stops answering round trips while the connection still reads as
    connected and the store answers (the worker's NATS node cut off from it), contact is
    lost within ``lost_after_s``, and ``confirmed_at`` stays at the start of the last NATS
    round trip that succeeded however many store round trips follow: the replies written
    into the silent connection after it are the outbox's to keep."""
    answering = [True]
    trips = [0]

    async def ping(timeout_s: float) -> None:
        trips[0] += 1
        if not answering[0]:
            await asyncio.sleep(timeout_s)
            raise TimeoutError

    watch = ContactWatch(
        _Store(),  # type: ignore[arg-type]
        lambda: True,
        lost_after_s=0.5,
        beat_period_s=0.1,
        nats_ping=ping,
    )
    probe = asyncio.create_task(watch.probe())
    try:
        await asyncio.sleep(0.6)
        assert trips[0] > 0
        assert watch.in_contact()
        answering[0] = False
        await asyncio.sleep(0.4)  # a round trip in flight at the switch may still succeed
        confirmed = watch.confirmed_at
        for _ in range(3):
            watch.store_seen(time.time())  # heartbeats still reach the store
            await asyncio.sleep(0.2)
        assert not watch.in_contact()
        assert watch.confirmed_at == confirmed
        answering[0] = True
        await asyncio.sleep(0.5)
        assert watch.in_contact()
        assert watch.confirmed_at > confirmed
    finally:
        probe.cancel()


async def test_a_silent_connection_is_dropped_once_per_silence() -> None:
    """Test that the watch drops a connection that reads as connected but has answered no
    round trip for ``lost_after_s``, once until a round trip succeeds again, and never one
    that reads as disconnected (nats-py is already moving) or that answers."""
    answering, connected = [False], [True]
    drops: list[float] = []

    async def ping(timeout_s: float) -> None:
        if not answering[0]:
            raise TimeoutError

    async def drop() -> None:
        drops.append(time.time())

    watch = ContactWatch(
        _Store(),  # type: ignore[arg-type]
        lambda: connected[0],
        lost_after_s=0.3,
        beat_period_s=0.1,
        nats_ping=ping,
        nats_drop=drop,
    )
    probe = asyncio.create_task(watch.probe())
    try:
        await asyncio.sleep(0.2)
        assert drops == []  # silent, but not for lost_after_s yet
        await asyncio.sleep(0.6)
        assert len(drops) == 1  # once, however long the silence
        answering[0] = True
        await asyncio.sleep(0.4)
        answering[0] = False
        await asyncio.sleep(0.8)
        assert len(drops) == 2  # a new silence after a round trip: dropped again
        connected[0] = False
        answering[0] = True
        await asyncio.sleep(0.4)
        answering[0] = False
        await asyncio.sleep(0.8)
        assert len(drops) == 2  # disconnected: nats-py's own reconnect is under way
    finally:
        probe.cancel()
