"""The scheduler's side of cancellation: remember cancels, mark them in Redis, end requests.

The scheduler owns a request from its hand-off until a router places it, so it ends the
cancelled requests it holds (queued) and those that reach it after their cancel (a submit,
a requeue, a restore). A cancel is remembered twice: in memory, written before the
handler's first ``await`` so a submit in the same event loop cannot slip between the
check and the push, and as a short-lived Redis mark that the store-new script checks and
that outlives a restart (docs/protocol.md, Cancellation).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Set as AbstractSet

import nats.errors
from redis.exceptions import RedisError

from proto.messages import ClassifiedRequest
from shared.cancels import CANCELLED_CODE, CancelMemory
from shared.counters import CANCELLED
from shared.lifecycle import ServiceContext
from shared.replies import reply_error

__all__ = ["CancelBook"]

logger = logging.getLogger(__name__)


class CancelBook:
    """Cancels the scheduler heard, and how it ends the requests they name."""

    def __init__(self, ctx: ServiceContext, service: str) -> None:
        self._ctx = ctx
        self._service = service
        self._ttl_s = ctx.settings.scheduler.cancel_ttl_s
        self._memory = CancelMemory(self._ttl_s)

    def heard(self, request_id: str) -> None:
        """Remember a cancel (synchronously: before any hand-off can interleave)."""
        self._memory.add(request_id, time.monotonic())

    def holds(self, request_id: str) -> bool:
        """Whether the request was cancelled (in memory)."""
        return self._memory.holds(request_id, time.monotonic())

    def split(
        self, requests: list[ClassifiedRequest], marked: AbstractSet[str] = frozenset()
    ) -> tuple[list[ClassifiedRequest], list[ClassifiedRequest]]:
        """The requests not cancelled, and those cancelled (in memory, or among ``marked``:
        the ids whose Redis mark was found)."""
        kept: list[ClassifiedRequest] = []
        cancelled: list[ClassifiedRequest] = []
        for req in requests:
            rid = req.request.request_id
            (cancelled if rid in marked or self.holds(rid) else kept).append(req)
        return kept, cancelled

    async def mark(self, request_id: str) -> None:
        """Write the Redis mark; on failure the memory alone covers this process's life."""
        try:
            await self._ctx.redis.set(
                self._ctx.keys.cancelled(request_id), b"1", ex=max(1, round(self._ttl_s))
            )
        except (RedisError, OSError) as exc:
            logger.warning("cancel of %s not marked in redis: %s", request_id, exc)

    async def marked(self, request_ids: list[str]) -> set[str]:
        """Those of ``request_ids`` whose Redis mark is set (a restart's restore); one
        round trip.

        Raises:
            RedisError: the marks could not be read.
        """
        if not request_ids:
            return set()
        # EXISTS per id, pipelined: the scheduler's Redis ACL grants EXISTS on the marks.
        pipe = self._ctx.redis.pipeline(transaction=False)
        for rid in request_ids:
            pipe.exists(self._ctx.keys.cancelled(rid))
        found = await pipe.execute()
        return {rid for rid, n in zip(request_ids, found, strict=True) if n}

    async def marked_now(self, request_ids: list[str]) -> set[str]:
        """:meth:`marked`, or none when Redis cannot be read (a requeue must go on: the
        memory still covers the cancels this process heard)."""
        try:
            return await self.marked(request_ids)
        except (RedisError, OSError) as exc:
            logger.warning(
                "cancel marks of %d requeued requests not read: %s", len(request_ids), exc
            )
            return set()

    async def end(self, requests: list[ClassifiedRequest], stage: str) -> None:
        """End each request with ``cancelled`` (client and ``request.done.control``).

        A reply that cannot be sent is not retried: its client went away, and the caller
        forgets the request locally whatever happens here.
        """
        for req in requests:
            CANCELLED.labels(self._service, stage).inc()
            with contextlib.suppress(nats.errors.Error):
                await reply_error(
                    self._ctx.nc,
                    self._ctx.subjects,
                    service=self._service,
                    code=CANCELLED_CODE,
                    reason=f"cancelled by its client ({stage})",
                    request=req.request,
                )
