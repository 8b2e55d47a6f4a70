"""The worker's record of the requests it ended, in Redis, for a router that adopts placements.

A restarted router reads back the placements recorded in Redis and dispatches each again
(:meth:`services.router.recovery.Recovery.adopt`). A worker that is alive answers from its
own memory; one that is gone cannot, and only this record tells a request it ended (its
client has the answer: running it again would answer twice) from one that died with it (which
must run again). The bookkeeping that normally forgets ended placements lives in the request
path, which may have been down when the request ended, and it forgets in 50-ms batches.

The record is a sorted set per worker (``Keys.ended``): request id → the wall time it ended,
written right after the completion (or error) is published: one ZADD, at most one in flight
and at most one per ``MIN_INTERVAL_S`` (so writes batch under load), trimmed to
``retention_s`` and its expiry renewed every ``TRIM_EVERY_S``. A worker killed between
publishing an ending and writing it leaves a window in which an adopting router would run
the request again: about one Redis round trip at low load, up to ``MIN_INTERVAL_S`` more
under load; a Redis outage widens it to the outage (the ids wait, bounded, for the next
write). Measured cost (instant workers, 1,000 req/s, 2-core host): see docs/performance.md.

While the worker is out of contact with the stack (a partition: :mod:`.publisher`) the
writes wait (:meth:`EndedLog.hold`): the router may be revoking those very requests to run
them elsewhere, and an ended record written for one of them would make the scheduler's
reaper or the router's audit forget it as answered while its answer here is never sent.
Once contact is back and the revocations are read, :meth:`EndedLog.release` drops the
revoked ids and writes the rest at once: a router that calls the worker silent just after
the heal finds them ended and does not run them again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from shared.counters import ERRORS
from shared.loops import wait_event

__all__ = ["PENDING_MAX", "EndedLog"]

PENDING_MAX: Final = 65_536
"""Ids kept for the next write while Redis is unreachable; the oldest go first beyond it."""
TRIM_EVERY_S: Final = 5.0
MIN_INTERVAL_S: Final = 0.005
"""Least time between two writes: a write per completion doubled an instant worker's CPU."""

logger = logging.getLogger(__name__)


class EndedLog:
    """Ended request ids, written to the worker's sorted set in Redis."""

    def __init__(self, redis: Redis, key: str, *, retention_s: float, service: str) -> None:
        """Write to ``key``, keeping ``retention_s`` seconds of endings."""
        self._redis = redis
        self._key = key
        self._retention_s = retention_s
        self._service = service
        self._pending: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._trimmed_at = 0.0
        self._held = False
        """Out of contact: keep the ids until :meth:`release` says which to drop."""

    def hold(self) -> None:
        """Keep what ends from now on (and what waits) until :meth:`release`."""
        self._held = True

    @property
    def held(self) -> bool:
        """Whether the writes wait for :meth:`release`."""
        return self._held

    def release(self, revoked: Iterable[str]) -> set[str]:
        """Drop the pending ids of requests the router revoked; write the rest again, and
        return them: those the stack may now take for answered here."""
        for rid in revoked:
            self._pending.pop(rid, None)
        self._held = False
        if self._pending:
            self._wake.set()
        return set(self._pending)

    def add(self, request_ids: Iterable[str]) -> None:
        """Note endings just published; the writer sends them at once."""
        now = time.time()
        for rid in request_ids:
            self._pending[rid] = now
        while len(self._pending) > PENDING_MAX:
            del self._pending[next(iter(self._pending))]
        if self._pending:
            self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Write until ``stop`` is set, then once more."""
        while not stop.is_set():
            await wait_event(self._wake, 0.5)
            self._wake.clear()
            if self._held:
                continue
            if not await self.flush():
                await asyncio.sleep(0.2)  # Redis away: retry without spinning
            else:
                await asyncio.sleep(MIN_INTERVAL_S)
        await self.flush()

    async def flush(self) -> bool:
        """Write what is pending; False (ids kept) when Redis failed."""
        if not self._pending:
            return True
        batch, self._pending = self._pending, {}
        now = time.time()
        trim = now - self._trimmed_at >= TRIM_EVERY_S
        try:
            if trim:
                pipe = self._redis.pipeline(transaction=False)
                pipe.zadd(self._key, batch)
                pipe.expire(self._key, max(1, int(self._retention_s)))
                pipe.zremrangebyscore(self._key, "-inf", now - self._retention_s)
                await pipe.execute()
            else:
                await self._redis.zadd(self._key, batch)
        except (RedisError, OSError) as exc:
            ERRORS.labels(self._service, "ended_log").inc()
            logger.warning("could not record %d ended requests: %s", len(batch), exc)
            self._pending = {**batch, **self._pending}
            return False
        if trim:
            self._trimmed_at = now
        return True
