"""A Redis that lost its data: the router writes back the placements it holds.

The placement records (``dispatched``) are what a restarted router adopts and what the
scheduler's reaper and audit read; the router itself works from memory (its registry).
A Redis that restarts empty erases them while the router goes on, and a crash of the router
(or of the co-located request path) after that left every placed request to its worker
alone, with nobody to re-queue it should that worker fail too. As the scheduler does for
its queues (``services/scheduler/store_loss.py``), a marker key tells a Redis that lost
its data; once it is gone every placement held is written back, then the marker again.
"""

from __future__ import annotations

import logging
from typing import Final

from prometheus_client import Counter
from redis.exceptions import RedisError

from proto.codec import encode
from proto.messages import Assignment
from services.router.registry import WorkerRegistry
from shared.lifecycle import ServiceContext

__all__ = ["MARKER_OWNER", "WRITTEN_BACK", "StoreLoss"]

MARKER_OWNER: Final = "router"
"""Owner name of the router's marker key."""

WRITTEN_BACK: Final = Counter(
    "greenserve_router_written_back_total",
    "Placements the router wrote back to a Redis that had lost its data",
)

logger = logging.getLogger(__name__)


class StoreLoss:
    """Notices a Redis that lost its data and writes back the router's placements."""

    def __init__(self, ctx: ServiceContext, registry: WorkerRegistry) -> None:
        """Watch ``ctx.redis`` for the placements of ``registry``."""
        self._ctx = ctx
        self._registry = registry
        self._marker = ctx.keys.store_marker(MARKER_OWNER)

    async def check(self) -> int:
        """Write the placements back if the marker is gone; return how many were.

        A placement whose dispatch is still unanswered is written too: a router that
        adopts it sends it to the same worker, which answers a repeat without a second run.
        The marker is set only after the write-back went through.
        """
        redis = self._ctx.redis
        try:
            if await redis.get(self._marker) is not None:
                return 0
            held = self._registry.held()
            if held:
                records = {
                    f.request.request.request_id: encode(
                        Assignment(
                            request=f.request,
                            worker_id=f.worker_id,
                            dispatched_at=f.accepted_at or f.placed_wall_s,
                        )
                    )
                    for f in held
                }
                await redis.hset(self._ctx.keys.dispatched, mapping=records)  # type: ignore[arg-type]
            await redis.set(self._marker, "1")
        except RedisError as exc:
            logger.debug("store check skipped: %s", exc)
            return 0
        if held:
            WRITTEN_BACK.inc(len(held))
            logger.warning("redis lost its data (marker gone): wrote back %d placements", len(held))
        return len(held)
