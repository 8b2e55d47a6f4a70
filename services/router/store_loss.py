"""A Redis that lost its data: the router writes back the placements it holds.

The placement records (``dispatched``) are what a restarted router adopts and what the
scheduler's reaper and audit read; the router itself works from memory (its registry). They
are written back when the router's marker key is gone (:mod:`shared.store_marker`), so a
crash of the router after a Redis that restarted empty leaves no placed request without
someone to re-queue it.
"""

from __future__ import annotations

import logging
from typing import Final

from prometheus_client import Counter

from proto.codec import encode
from proto.messages import Assignment
from services.router.registry import WorkerRegistry
from shared.lifecycle import ServiceContext
from shared.store_marker import write_back_if_lost

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
        """
        written = await write_back_if_lost(
            self._ctx.redis,
            self._marker,
            self._write_back,
            follow_failover=bool(self._ctx.settings.redis.sentinels),
        )
        if written:
            WRITTEN_BACK.inc(written)
            logger.warning("redis lost its data or failed over: wrote back %d placements", written)
        return written

    async def _write_back(self) -> int:
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
            await self._ctx.redis.hset(self._ctx.keys.dispatched, mapping=records)  # type: ignore[arg-type]
        return len(held)
