"""The scheduler's memory of ended requests, and the batched delete of their Redis records.

A request ends (a completion or an error on ``request.done``, a cancel, a shed) and the
scheduler forgets it: :meth:`EndedMemory.ended` notes it, :meth:`EndedMemory.forget`
deletes the noted records from Redis in one round trip per period (and once more a second
later, for a placement record written after the end). Ends of the last minute are also
remembered in memory, so a late requeue of a request that ran (its dispatch reply was lost)
is dropped instead of run twice.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque

from proto.keys import Keys
from shared.lifecycle import ServiceContext

__all__ = ["ENDED_MEMORY_MAX", "ENDED_MEMORY_S", "FORGET_AGAIN_S", "EndedMemory"]

FORGET_AGAIN_S = 1.0
"""Delay of the second delete of an ended request's record (:meth:`EndedMemory.forget`)."""
ENDED_MEMORY_S = 60.0
"""How long the scheduler remembers an ended request (to drop a late requeue of it)."""
ENDED_MEMORY_MAX = 200_000
"""At most this many remembered ends (≈ 60 s at 3,000 req/s)."""


class EndedMemory:
    """Ended request ids: recent ones to drop late requeues, pending ones to delete."""

    def __init__(self, ctx: ServiceContext) -> None:
        self._ctx = ctx
        self._ended_ids: set[str] = set()
        self._forget_again: deque[tuple[float, list[str]]] = deque()
        """Ids deleted from Redis, with when: deleted once more after ``FORGET_AGAIN_S``."""
        self._recently_ended: OrderedDict[str, float] = OrderedDict()
        """Ended ids of the last :data:`ENDED_MEMORY_S` (wall): a late requeue is dropped."""

    def __contains__(self, request_id: str) -> bool:
        """Whether the request ended within the last :data:`ENDED_MEMORY_S`."""
        return request_id in self._recently_ended

    def ended(self, request_id: str) -> None:
        """Note an end: remembered for a while, its records deleted in the next flush."""
        now = time.monotonic()
        self._recently_ended[request_id] = now
        self._recently_ended.move_to_end(request_id)
        while self._recently_ended:
            oldest, at = next(iter(self._recently_ended.items()))
            if now - at <= ENDED_MEMORY_S and len(self._recently_ended) <= ENDED_MEMORY_MAX:
                break
            del self._recently_ended[oldest]
        self._ended_ids.add(request_id)

    async def forget(self) -> None:
        """Delete ended requests from Redis, batched: one round trip per period.

        Each id is deleted from ``dispatched`` once more ``FORGET_AGAIN_S`` later: a router
        writes a placement's record after the worker accepted it, and a request that ended
        while that write was on its way could have its record written after this delete,
        left for a restarted router to adopt.
        """
        now = time.monotonic()
        again: list[str] = []
        while self._forget_again and now - self._forget_again[0][0] >= FORGET_AGAIN_S:
            again += self._forget_again.popleft()[1]
        if not self._ended_ids and not again:
            return
        done = list(self._ended_ids)
        keys: Keys = self._ctx.keys
        pipe = self._ctx.redis.pipeline(transaction=False)
        pipe.hdel(keys.dispatched, *done, *again)
        if done:
            # Also from ``queued``: a request the co-located router placed but had not
            # recorded yet when it ended is still there, and would run again after a restart.
            pipe.hdel(keys.queued, *done)
        await pipe.execute()
        self._ended_ids.difference_update(done)
        if done:
            self._forget_again.append((now, done))
