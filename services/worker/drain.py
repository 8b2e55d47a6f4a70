"""The end of a drain: requests a stopping worker could not finish go back to the scheduler.

A worker that stops (``ctx.stop``) refuses new dispatches, lets what it runs finish within
``shutdown_timeout_s`` and aborts the rest (:meth:`.shim.WorkerShim.drain`).
:func:`hand_back` sends those to ``scheduler.requeue`` so they run elsewhere; if that
fails, nothing is lost: the router re-queues them as orphans once this worker's heartbeat
has expired.
"""

from __future__ import annotations

import logging

import nats.errors

from proto.codec import DecodeError
from proto.messages import ClassifiedRequest, RequeueRequest, SubmitReply
from shared.bus import request
from shared.counters import ERRORS
from shared.lifecycle import ServiceContext

__all__ = ["hand_back"]

logger = logging.getLogger(__name__)


async def hand_back(ctx: ServiceContext, leftovers: list[ClassifiedRequest], service: str) -> None:
    """Hand unfinished requests back to the scheduler; a failure is counted and logged."""
    if not leftovers:
        return
    logger.warning("handing %d unfinished requests back to the scheduler", len(leftovers))
    try:
        await request(
            ctx.nc,
            ctx.subjects.scheduler_requeue,
            RequeueRequest(requests=leftovers),
            SubmitReply,
            ctx.settings.nats.request_timeout_s,
        )
    except (nats.errors.Error, DecodeError) as exc:
        # The router re-queues them as orphans once this worker's heartbeat is gone.
        ERRORS.labels(service, "requeue").inc(len(leftovers))
        logger.warning("could not hand %d requests back: %s", len(leftovers), exc)
