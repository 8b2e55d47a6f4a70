"""A Redis that lost its data: the scheduler writes back the queues it holds.

Redis is the scheduler's recovery log, not its working copy: the queues live in memory and
every change is recorded in Redis so a restarted scheduler can reload them. A Redis that
restarts empty (no append-only file, or a lost disk) erases that log while the scheduler
goes on serving from memory; a crash of the scheduler after that lost every request it
held. A marker key (``Keys.store_marker``) tells a Redis that lost its data from one that
kept it: while it is there nothing happens; once it is gone the queued requests, and their
seen-marks, are written back before the marker is set again, so a crash at any point after
the write-back loses nothing.
"""

from __future__ import annotations

import logging
from typing import Final

from prometheus_client import Counter
from redis.exceptions import RedisError

from proto.codec import encode
from services.scheduler.intake import SEEN_TTL_S, seen_mark
from services.scheduler.pool_queues import SchedulerState
from shared.lifecycle import ServiceContext

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
        """Write the queues back if the marker is gone; return how many requests were.

        The marker is set only after the write-back went through: a Redis that fails in
        between is found without it again at the next check. A Redis that cannot be
        reached is checked again next period (its outage is the hand-offs' to report).
        """
        redis = self._ctx.redis
        try:
            if await redis.get(self._marker) is not None:
                return 0
            held = self._state.held()
            if held:
                pipe = redis.pipeline(transaction=False)
                pipe.hset(
                    self._ctx.keys.queued,
                    mapping={r.request.request_id: encode(r) for r in held},
                )
                # A redelivery of a held request's ingress message stays a duplicate (the
                # Redis that lost the marks would store and queue it a second time).
                for req in held:
                    pipe.set(
                        self._ctx.keys.seen(req.request.request_id),
                        f"{seen_mark(req)}|restored",
                        nx=True,
                        ex=SEEN_TTL_S,
                    )
                await pipe.execute()
            await redis.set(self._marker, "1")
        except RedisError as exc:
            logger.debug("store check skipped: %s", exc)
            return 0
        if held:
            WRITTEN_BACK.inc(len(held))
            logger.warning(
                "redis lost its data (marker gone): wrote back %d queued requests", len(held)
            )
        return len(held)
