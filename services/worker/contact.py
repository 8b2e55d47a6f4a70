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

A lost NATS node is noticed by its reconnect, not by ``is_connected`` alone: nats-py moves to
another node of a cluster within milliseconds, between two looks of the re-send loop, and
what the worker had written to the dying node's socket is gone all the same. So a
reconnect since the last look counts as contact lost for that look.
"""

from __future__ import annotations

import asyncio
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
    "nats_round_trip",
]

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
    ) -> None:
        """``lost_after_s`` without a store round trip (or, given ``nats_ping``, without a
        NATS one) is lost contact; the watch PINGs the store once no heartbeat (every
        ``beat_period_s``) got through for a period and more, and NATS every
        :data:`NATS_CHECK_PERIOD_S`. ``nats_reconnects`` counts the NATS client's
        reconnects (``nc.stats``)."""
        self._redis = redis
        self._nats_connected = nats_connected
        self._nats_ping = nats_ping
        self._lost_after_s = lost_after_s
        self._beat_period_s = beat_period_s
        self._nats_reconnects = nats_reconnects
        self._reconnects_seen = nats_reconnects()
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
            return
        self.nats_seen(started)

    async def _probe_store(self) -> None:
        started = time.time()
        if started - self._store_seen_at <= self._beat_period_s + PROBE_PERIOD_S:
            return
        try:
            await asyncio.wait_for(self._redis.ping(), PROBE_TIMEOUT_S)
        except (TimeoutError, RedisError, OSError):
            return
        self.store_seen(started)
