"""The scheduler's reaper and audit over the placement records (``dispatched`` in Redis).

Once a second the scheduler reads the placement records once for both jobs
(:meth:`Reaper.sweep`): requests a router pulled but never placed within
``scheduler.unplaced_timeout_s`` (that router died) go back to the queue, and, once per
``scheduler.ended_audit_period_s``, placed requests whose workers ended them unheard (the
scheduler was down or disconnected when their ``request.done`` went out) are found in the
workers' ended records (:mod:`shared.ended_lookup`) and forgotten, or a restarted router
would adopt and dispatch them again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from proto.messages import UNPLACED_WORKER, Assignment, ClassifiedRequest
from shared.counters import MISSED_ENDINGS
from shared.ended_lookup import ended_among, placement_records
from shared.lifecycle import ServiceContext

__all__ = ["Reaper", "unplaced_stale"]

logger = logging.getLogger(__name__)


class Reaper:
    """Re-queues pulled-but-unplaced requests and forgets the ones that ended unheard."""

    def __init__(
        self,
        ctx: ServiceContext,
        *,
        requeue: Callable[[list[ClassifiedRequest]], Awaitable[None]],
        ended: Callable[[str], None],
        service: str,
    ) -> None:
        """``requeue`` and ``ended`` are the shell's own (cancelled and ended ones end)."""
        self._ctx = ctx
        self._requeue = requeue
        self._ended = ended
        self._service = service
        self._audited_at = time.monotonic()
        """When :meth:`sweep` last audited (the first audit waits one period)."""

    async def sweep(self) -> None:
        """One read of the placement records for the reaper and, once per audit period,
        the audit (:meth:`audit_endings`): the ``dispatched`` hash holds every request in
        flight, and reading and decoding it twice cost twice."""
        ctx = self._ctx
        records = await placement_records(ctx.redis, ctx.keys)
        stale = unplaced_stale(records, ctx.settings.scheduler.unplaced_timeout_s)
        if stale:
            logger.warning("re-queueing %d requests pulled but never placed", len(stale))
            await self._requeue(stale)  # the way every requeue goes: ended or cancelled ones end
        now = time.monotonic()
        if now - self._audited_at >= ctx.settings.scheduler.ended_audit_period_s:
            self._audited_at = now
            await self.audit_endings(records)

    async def audit_endings(self, records: list[Assignment] | None = None) -> None:
        """Forget the placement records of requests their workers ended unheard.

        A scheduler that was down or disconnected when a request ended never heard its
        ``request.done``, and the request's ``dispatched`` record would stay for good (a
        restarted router would adopt it and dispatch it again). Records older than one
        audit period are looked up in the workers' ended records
        (:mod:`shared.ended_lookup`); those found are forgotten as on ``request.done``.

        Args:
            records: the placement records, when the caller has just read them.
        """
        ctx = self._ctx
        if records is None:
            records = await placement_records(ctx.redis, ctx.keys)
        cutoff = time.time() - ctx.settings.scheduler.ended_audit_period_s
        placed = [
            (held.request.request.request_id, held.worker_id)
            for held in records
            if held.worker_id != UNPLACED_WORKER and held.dispatched_at < cutoff
        ]
        if not placed:
            return
        ended = await ended_among(ctx.redis, ctx.keys, placed)
        if not ended:
            return
        logger.warning("forgetting %d placed requests that had ended unheard", len(ended))
        MISSED_ENDINGS.labels(self._service).inc(len(ended))
        for rid in ended:
            self._ended(rid)


def unplaced_stale(records: list[Assignment], timeout_s: float) -> list[ClassifiedRequest]:
    """Requests a router pulled but never placed within ``timeout_s`` (the router died)."""
    now = time.time()
    return [
        held.request
        for held in records
        if held.worker_id == UNPLACED_WORKER and now - held.dispatched_at > timeout_s
    ]
