"""How the router reaches the scheduler: by request/reply over NATS when they run as separate
processes (:class:`NatsSchedulerLink`), or in memory when co-located
(``greenserve.local.requestpath``, which passes its own :class:`SchedulerLink`)."""

from __future__ import annotations

import logging
from typing import Protocol

import nats.errors

from proto.codec import DecodeError
from proto.messages import ClassifiedRequest, PullReply, PullRequest, RequeueRequest, SubmitReply
from shared.bus import request
from shared.lifecycle import ServiceContext

__all__ = ["NatsSchedulerLink", "SchedulerLink"]

logger = logging.getLogger(__name__)


class SchedulerLink(Protocol):
    """How the router reaches the scheduler: over NATS, or in memory when co-located."""

    records_pull: bool
    """Whether :meth:`pull` already moved the requests to ``dispatched`` in Redis; if not,
    the router's assignment record also removes them from ``queued``."""

    async def pull(self, pool_id: str, slots: int) -> tuple[list[ClassifiedRequest], int]:
        """Up to ``slots`` requests of the pool and the depth left; ``([], 1)`` on failure."""
        ...

    async def requeue(self, requests: list[ClassifiedRequest]) -> None:
        """Hand requests back to the scheduler."""
        ...

    def ended_unheard(self, request_ids: list[str]) -> None:
        """Requests the router found ended in the workers' records, their ``request.done``
        never heard (:meth:`services.router.recovery.Recovery.audit_endings`)."""
        ...


class NatsSchedulerLink:
    """The scheduler of a separate process, by request/reply."""

    records_pull = True

    def __init__(self, ctx: ServiceContext) -> None:
        """Pull and requeue over ``ctx.nc``."""
        self._ctx = ctx

    async def pull(self, pool_id: str, slots: int) -> tuple[list[ClassifiedRequest], int]:
        """Ask the scheduler for up to ``slots`` requests of one pool."""
        ctx = self._ctx
        try:
            reply = await request(
                ctx.nc,
                ctx.subjects.scheduler_pull,
                PullRequest(pool_id=pool_id, slots=slots, router_id=ctx.settings.router.router_id),
                PullReply,
                ctx.settings.nats.request_timeout_s,
            )
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, DecodeError) as exc:
            logger.warning("pull from scheduler failed: %s", exc)
            return [], 1
        return reply.requests, reply.queued

    async def requeue(self, requests: list[ClassifiedRequest]) -> None:
        """Return requests by ``scheduler.requeue``."""
        await _requeue(self._ctx, requests)

    def ended_unheard(self, request_ids: list[str]) -> None:
        """Nothing to tell: a separate scheduler audits its own records
        (:meth:`services.scheduler.service.SchedulerShell.audit_endings`)."""


async def _requeue(ctx: ServiceContext, requests: list[ClassifiedRequest]) -> None:
    try:
        await request(
            ctx.nc,
            ctx.subjects.scheduler_requeue,
            RequeueRequest(requests=requests),
            SubmitReply,
            ctx.settings.nats.request_timeout_s,
        )
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError, DecodeError) as exc:
        # The scheduler's reaper re-queues these from Redis once they go stale.
        logger.warning("requeue of %d requests failed: %s", len(requests), exc)
