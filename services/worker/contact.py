"""Whether a worker is in contact with the stack: NATS answering and the store answering.

A worker on a host cut off from the rest (a partition) may keep its NATS connection, to the
node on its own side of the cut, which takes its publishes and has no route to the
clients; what it does notice is that the store, on another host, no longer answers. The
other way round, a worker whose NATS node is cut off from it while the store still
answers keeps a connection that reads as connected until nats-py's pings time out
(seconds), and every publish meanwhile is written into a socket that goes nowhere. So
contact is three things: NATS connected, a NATS round trip (a PING answered by a PONG,
which proves the server has read everything published before it) within ``lost_after_s``,
and a store round trip (the heartbeat, or a PING this watch sends while no heartbeat got
through) within ``lost_after_s``. ``confirmed_at`` is the start of the latest moment both
round trips vouch for: what was published before it reached the server while the worker
could reach the store. The publisher keeps replies while contact is lost, sends again what
followed ``confirmed_at`` once it is back, and checks revocations first (:mod:`.publisher`,
:mod:`.outbox`).

A connection found silent this way is dropped at once (:func:`drop_connection`): aborted
with a zero linger, so that neither asyncio nor the kernel keeps what was written to it,
and replaced by one to another node. Left alone, the kernel retransmits that data for
minutes and delivers it when the cut heals, so a request the router took back and ran
elsewhere meanwhile was answered twice; dropped, everything written after the last
round trip that succeeded is the outbox's, which sends it again unless the request was
taken back.

A lost NATS node is noticed by its reconnect, not by ``is_connected`` alone: nats-py moves to
another node of a cluster within milliseconds, between two looks of the re-send loop, and
what the worker had written to the dying node's socket is gone all the same. So a
reconnect since the last look counts as contact lost for that look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Final

import nats.errors
from nats.aio.client import Client
from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = [
    "NATS_CHECK_PERIOD_S",
    "PROBE_PERIOD_S",
    "PROBE_TIMEOUT_S",
    "ContactWatch",
    "drop_connection",
    "nats_round_trip",
]

logger = logging.getLogger(__name__)

PROBE_PERIOD_S: Final = 0.1
"""How often the watch looks whether the store needs a PING or NATS a round trip."""
PROBE_TIMEOUT_S: Final = 0.3
"""A store or NATS server that does not answer a PING this fast counts as out of reach for
now."""
NATS_CHECK_PERIOD_S: Final = 0.25
"""How often a NATS round trip is made: the replies a lost connection may have swallowed
that the outbox must keep span at most this, the timeout and its window."""

RoundTrip = Callable[[float], Awaitable[None]]
"""One round trip with a timeout in seconds; raises if it did not complete."""


async def nats_round_trip(nc: Client, timeout_s: float) -> None:
    """A PING answered by a PONG on ``nc``'s current connection.

    Raises:
        ConnectionError: not connected, or the connection changed meanwhile (nats-py's
            ``flush`` returns without a round trip while it reconnects).
        nats.errors.Error: no PONG within ``timeout_s``, or the connection is closed.
    """
    if not _connected(nc):
        raise ConnectionError("NATS is not connected")
    before = nc.stats["reconnects"]
    await nc.flush(timeout_s)  # type: ignore[arg-type]  # typed int, takes any seconds
    if not _connected(nc) or nc.stats["reconnects"] != before:
        raise ConnectionError("NATS reconnected during the round trip")


async def drop_connection(nc: Client) -> None:
    """Abort ``nc``'s current connection, discarding what is still queued on it, and
    reconnect to another server of its list.

    nats-py's own reconnect closes the transport gracefully, which keeps sending what is
    queued (and waits for it while the peer is silent). The transport is reached through
    nats-py's private ``_transport``; where that is not a plain TCP one, only the
    reconnect is asked for.
    """
    writer = getattr(getattr(nc, "_transport", None), "_io_writer", None)
    if isinstance(writer, asyncio.StreamWriter):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                # A zero linger makes the close a reset: the kernel's send queue goes too.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    await nc.force_reconnect()


def _connected(nc: Client) -> bool:
    # A call, not the property inline: the connection may change across the await.
    return nc.is_connected


class ContactWatch:
    """The worker's contact with NATS and the store, from its heartbeats and PINGs."""

    def __init__(
        self,
        redis: Redis,
        nats_connected: Callable[[], bool],
        *,
        lost_after_s: float,
        beat_period_s: float,
        nats_reconnects: Callable[[], int] = lambda: 0,
        nats_ping: RoundTrip | None = None,
        nats_drop: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``lost_after_s`` without a store round trip (or, given ``nats_ping``, without a
        NATS one) is lost contact; the watch PINGs the store once no heartbeat (every
        ``beat_period_s``) got through for a period and more, and NATS every
        :data:`NATS_CHECK_PERIOD_S`. ``nats_reconnects`` counts the NATS client's
        reconnects (``nc.stats``); ``nats_drop`` (:func:`drop_connection`) is called once
        when a connection that reads as connected has answered no round trip for
        ``lost_after_s``."""
        self._redis = redis
        self._nats_connected = nats_connected
        self._nats_ping = nats_ping
        self._lost_after_s = lost_after_s
        self._beat_period_s = beat_period_s
        self._nats_reconnects = nats_reconnects
        self._reconnects_seen = nats_reconnects()
        self._nats_drop = nats_drop
        self._dropped_at: float | None = None
        """When the silent connection was dropped (None: none since the last round trip)."""
        now = time.time()
        self._store_seen_at = now
        """Wall time the last store round trip that succeeded began."""
        self._nats_seen_at = now
        """Wall time the last NATS round trip that succeeded began."""
        self.confirmed_at = now
        """Wall time up to which both round trips vouch for contact, NATS connected: what
        was published before it reached the server while the store answered."""

    def in_contact(self) -> bool:
        """NATS connected and answering, not reconnected since the last look, and the store
        answered lately. One caller only (the re-send loop): a reconnect is reported to one
        look."""
        reconnects = self._nats_reconnects()
        if reconnects != self._reconnects_seen:
            self._reconnects_seen = reconnects
            return False
        now = time.time()
        recent = now - self._store_seen_at <= self._lost_after_s
        if self._nats_ping is not None:
            recent = recent and now - self._nats_seen_at <= self._lost_after_s
        return recent and self._nats_connected()

    def store_seen(self, started: float) -> None:
        """A store round trip begun at ``started`` (wall) succeeded."""
        self._store_seen_at = max(self._store_seen_at, started)
        self._confirm()

    def nats_seen(self, started: float) -> None:
        """A NATS round trip begun at ``started`` (wall) succeeded."""
        self._nats_seen_at = max(self._nats_seen_at, started)
        self._dropped_at = None
        self._confirm()

    def _confirm(self) -> None:
        if not self._nats_connected():
            return
        vouched = self._store_seen_at
        if self._nats_ping is not None:
            vouched = min(vouched, self._nats_seen_at)
        self.confirmed_at = max(self.confirmed_at, vouched)

    async def probe(self) -> None:
        """Until cancelled: PING the store whenever no heartbeat has reached it for a while,
        and make a NATS round trip every :data:`NATS_CHECK_PERIOD_S`, each with a short
        timeout. A heartbeat that fails backs off for seconds, and nats-py's own pings
        take seconds to find a silent connection; until contact is known to be back the
        output of a request the router revoked would go out unchecked, and until it is
        known lost the replies going nowhere would not be kept."""
        while True:
            await asyncio.sleep(PROBE_PERIOD_S)
            await self._probe_nats()
            await self._probe_store()

    async def _probe_nats(self) -> None:
        started = time.time()
        if self._nats_ping is None or started - self._nats_seen_at < NATS_CHECK_PERIOD_S:
            return
        try:
            await self._nats_ping(PROBE_TIMEOUT_S)
        except (TimeoutError, ConnectionError, nats.errors.Error):
            await self._drop_if_silent()
            return
        self.nats_seen(started)

    async def _drop_if_silent(self) -> None:
        """Drop a connection that reads as connected but answered no round trip for
        ``lost_after_s``, once until a round trip succeeds again."""
        now = time.time()
        silent = now - self._nats_seen_at > self._lost_after_s and self._nats_connected()
        if self._nats_drop is None or not silent or self._dropped_at is not None:
            return
        self._dropped_at = now
        logger.warning(
            "NATS answered no round trip for %.1f s: dropping the connection (what it still "
            "queues is discarded; the outbox sends it again) and moving to another node",
            now - self._nats_seen_at,
        )
        await self._nats_drop()

    async def _probe_store(self) -> None:
        started = time.time()
        if started - self._store_seen_at <= self._beat_period_s + PROBE_PERIOD_S:
            return
        try:
            await asyncio.wait_for(self._redis.ping(), PROBE_TIMEOUT_S)
        except (TimeoutError, RedisError, OSError):
            return
        self.store_seen(started)
