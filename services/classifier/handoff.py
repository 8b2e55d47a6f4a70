"""A classified batch's hand-off to the scheduler, and the ack that follows it.

A message is acked only once the scheduler answered that it holds the request (stored,
a duplicate, or cancelled first); a hand-off that failed stored nothing for sure
(:data:`HANDOFF_ERRORS`), so its messages are nak'ed for JetStream to redeliver. The
scheduler is reached by ``submit``: over NATS in the separate deployment
(:func:`nats_submit`), by a direct call in the co-located one (``services.requestpath``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
import nats.errors
from nats.aio.msg import Msg
from opentelemetry import trace
from redis.exceptions import RedisError

from proto.codec import DecodeError
from proto.messages import ClassifiedRequest, SubmitBatch, SubmitBatchReply
from services.classifier.classify_message import NAME, classify_message
from services.classifier.ingress_identity import refuse_reused_id
from services.classifier.pipeline import ClassifierCore
from shared.bus import HOPS_HEADER, add_hops, request
from shared.counters import ERRORS, REQUESTS
from shared.lifecycle import ServiceContext

__all__ = ["HANDOFF_ERRORS", "Submit", "handle_batch", "nats_submit"]

logger = logging.getLogger(__name__)


Submit = Callable[[list[ClassifiedRequest]], Awaitable[SubmitBatchReply]]
"""Hands classified requests to the scheduler; returns only once they are stored."""

HANDOFF_ERRORS: tuple[type[Exception], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    DecodeError,
    RedisError,
)
"""A hand-off that failed with one of these stored nothing for sure: nak, redeliver."""


def nats_submit(ctx: ServiceContext) -> Submit:
    """Hand-off to a scheduler process by request/reply on ``scheduler.submit``."""

    async def submit(requests: list[ClassifiedRequest]) -> SubmitBatchReply:
        return await request(
            ctx.nc,
            ctx.subjects.scheduler_submit,
            SubmitBatch(requests=requests),
            SubmitBatchReply,
            ctx.settings.nats.request_timeout_s,
        )

    return submit


async def handle_batch(
    ctx: ServiceContext,
    core: ClassifierCore,
    msgs: list[Msg],
    submit: Submit,
    tracer: trace.Tracer,
    fetched_at: float = 0.0,
) -> None:
    """Classify a fetch batch, hand it to the scheduler in one request, then ack or nak."""
    ready: list[tuple[Msg, ClassifiedRequest]] = []
    for msg in msgs:
        classified = await classify_message(ctx, core, msg, tracer)
        if classified is not None:
            ready.append((msg, classified))
    if not ready:
        return
    # --- opt-in hop stamps (bench --hops): fetch returned, hand-off starts ---
    if any(msg.headers and HOPS_HEADER in msg.headers for msg, _ in ready):
        now = time.time()
        ready = [
            (msg, c)
            if not (msg.headers and HOPS_HEADER in msg.headers)
            else (
                msg,
                msgspec.structs.replace(c, trace=add_hops(c.trace, fetch=fetched_at, submit=now)),
            )
            for msg, c in ready
        ]
    # --- end hop stamps ---
    try:
        reply = await submit([c for _, c in ready])
    except HANDOFF_ERRORS as exc:
        # The scheduler is away or restarting: let JetStream redeliver soon.
        ERRORS.labels(NAME, "handoff").inc(len(ready))
        logger.warning("hand-off of %d requests failed (%s); will be redelivered", len(ready), exc)
        for msg, _ in ready:
            await msg.nak(delay=0.5)
        return
    accepted = set(reply.accepted)
    # Cancelled before it was queued: ended by the scheduler already, so acked as well.
    held = accepted | set(reply.duplicates) | set(reply.cancelled)
    reused = set(reply.reused)
    for msg, classified in ready:
        rid = classified.request.request_id
        if classified.ingress_seq and classified.ingress_seq in reused:
            # A new message with an id its client used before: not stored, answered.
            await refuse_reused_id(ctx.nc, ctx.subjects, msg, classified.request)
            continue
        if rid in accepted:
            REQUESTS.labels(classified.request_class, classified.pool_id).inc()
        if rid in held:
            await msg.ack()
        else:
            await msg.nak(delay=0.5)
