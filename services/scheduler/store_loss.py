"""A Redis that lost its data: the scheduler writes back the queues it holds.

The queued requests, and their seen-marks, are written back when the scheduler's marker
key is gone (:mod:`shared.store_marker`), so a crash of the scheduler after a Redis that
restarted empty loses nothing.
"""

from __future__ import annotations

import logging
from typing import Final

from prometheus_client import Counter

from proto.codec import encode
from services.scheduler.intake import SEEN_TTL_S, seen_mark
from services.scheduler.pool_queues import SchedulerState
from shared.lifecycle import ServiceContext
from shared.store_marker import write_back_if_lost

__all__ = ["MARKER_OWNER", "WRITTEN_BACK", "StoreLoss"]

MARKER_OWNER: Final = "scheduler"
"""Owner name of the scheduler's marker key."""

WRITTEN_BACK: Final = Counter(
    "greenserve_scheduler_written_back_total",
    "Queued requests the scheduler wrote back to a Redis that had lost its data",
)

logger = logging.getLogger(__name__)


class StoreLoss:
    """Notices a Redis that lost its data and writes back what the scheduler holds."""

    def __init__(self, ctx: ServiceContext, state: SchedulerState) -> None:
        """Watch ``ctx.redis`` for the queues of ``state``."""
        self._ctx = ctx
        self._state = state
        self._marker = ctx.keys.store_marker(MARKER_OWNER)

    async def check(self) -> int:
        """Write the queues back if the marker is gone; return how many requests were."""
        written = await write_back_if_lost(
            self._ctx.redis,
            self._marker,
            self._write_back,
            follow_failover=bool(self._ctx.settings.redis.sentinels),
        )
        if written:
            WRITTEN_BACK.inc(written)
            logger.warning(
                "redis lost its data or failed over: wrote back %d queued requests", written
            )
        return written

    async def _write_back(self) -> int:
        held = self._state.held()
        if held:
            pipe = self._ctx.redis.pipeline(transaction=False)
            pipe.hset(
                self._ctx.keys.queued,
                mapping={r.request.request_id: encode(r) for r in held},
            )
            # A redelivery of a held request's ingress message stays a duplicate (the Redis
            # that lost the marks would store and queue it a second time).
            for req in held:
                pipe.set(
                    self._ctx.keys.seen(req.request.request_id),
                    f"{seen_mark(req)}|restored",
                    nx=True,
                    ex=SEEN_TTL_S,
                )
            await pipe.execute()
        return len(held)
