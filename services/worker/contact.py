"""Whether a worker is in contact with the stack: NATS connected and the store answering.

A worker on a host cut off from the rest (a partition) may keep its NATS connection, to the
node on its own side of the cut, which takes its publishes and has no route to the
clients; what it does notice is that the store, on another host, no longer answers. So
contact is both: NATS connected, and a store round trip (the heartbeat, or a PING this
watch sends while no heartbeat got through) that succeeded within ``lost_after_s``. The
publisher keeps replies while contact is lost and checks revocations once it is back
(:mod:`.publisher`, :mod:`.outbox`).

A lost NATS node is noticed by its reconnect, not by ``is_connected`` alone: nats-py moves to
another node of a cluster within milliseconds, between two looks of the re-send loop, and
what the worker had written to the dying node's socket is gone all the same. So a
reconnect since the last look counts as contact lost for that look.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["PROBE_PERIOD_S", "PROBE_TIMEOUT_S", "ContactWatch"]

PROBE_PERIOD_S: Final = 0.1
"""How often the watch looks whether the store needs a PING."""
PROBE_TIMEOUT_S: Final = 0.3
"""A store that does not answer a PING this fast counts as out of reach for now."""


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
    ) -> None:
        """``lost_after_s`` without a store round trip is lost contact; the watch PINGs
        once no heartbeat (every ``beat_period_s``) got through for a period and more.
        ``nats_reconnects`` counts the NATS client's reconnects (``nc.stats``)."""
        self._redis = redis
        self._nats_connected = nats_connected
        self._nats_reconnects = nats_reconnects
        self._reconnects_seen = nats_reconnects()
        self._lost_after_s = lost_after_s
        self._beat_period_s = beat_period_s
        now = time.time()
        self._store_seen_at = now
        """Wall time the last store round trip that succeeded began."""
        self.confirmed_at = now
        """Wall time the last store round trip that succeeded with NATS connected began:
        what was published well before it went out while the worker was in contact."""

    def in_contact(self) -> bool:
        """NATS connected, not reconnected since the last look, and the store answered
        lately. One caller only (the re-send loop): a reconnect is reported to one look."""
        reconnects = self._nats_reconnects()
        if reconnects != self._reconnects_seen:
            self._reconnects_seen = reconnects
            return False
        recent = time.time() - self._store_seen_at <= self._lost_after_s
        return recent and self._nats_connected()

    def store_seen(self, started: float) -> None:
        """A store round trip begun at ``started`` (wall) succeeded."""
        self._store_seen_at = max(self._store_seen_at, started)
        if self._nats_connected():
            self.confirmed_at = max(self.confirmed_at, started)

    async def probe(self) -> None:
        """PING the store whenever no heartbeat has reached it for a while, with a short
        timeout, until cancelled: a heartbeat that fails backs off for seconds, and until
        contact is known to be back the output of a request the router revoked would go
        out unchecked."""
        while True:
            await asyncio.sleep(PROBE_PERIOD_S)
            started = time.time()
            if started - self._store_seen_at <= self._beat_period_s + PROBE_PERIOD_S:
                continue
            try:
                await asyncio.wait_for(self._redis.ping(), PROBE_TIMEOUT_S)
            except (TimeoutError, RedisError, OSError):
                continue
            self.store_seen(started)
