"""A classified batch's hand-off to the scheduler, and the ack that follows it.

A message is acked only once the scheduler answered that it holds the request (stored,
a duplicate, or cancelled first); a hand-off that failed stored nothing for sure
(:data:`HANDOFF_ERRORS`), so its messages are nak'ed for JetStream to redeliver, with a
growing wait, until one is too old and is answered ``unavailable`` instead
(:mod:`.redelivery`). The scheduler is reached by ``submit``: over NATS in the separate
deployment (:func:`nats_submit`), by a direct call in the co-located one
(``greenserve.local.requestpath``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

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
from services.classifier.redelivery import RedeliveryPolicy
from shared.bus import HOPS_HEADER, add_hops, request
from shared.counters import ERRORS, REQUESTS
from shared.lifecycle import ServiceContext
from shared.replies import reply_error

__all__ = [
    "HANDOFF_ERRORS",
    "OVERLOADED",
    "UNAVAILABLE",
    "Submit",
    "delivery_of",
    "handle_batch",
    "nats_submit",
    "retry_later",
    "shed_stale",
]

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
UNAVAILABLE = "unavailable"
"""Error code of a request whose hand-off kept failing until it was given up."""
OVERLOADED = "overloaded"
"""Error code of a request that waited in the ingress stream past its bound (the
scheduler's ceiling answers with the same code)."""


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
    ready = await shed_stale(ctx, ready)
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
        # The scheduler or Redis is away: JetStream redelivers, after a growing wait.
        ERRORS.labels(NAME, "handoff").inc(len(ready))
        logger.warning("hand-off of %d requests failed (%s); will be redelivered", len(ready), exc)
        for msg, classified in ready:
            await retry_later(ctx, RedeliveryPolicy.from_settings(ctx.settings), msg, classified)
        return
    accepted = set(reply.accepted)
    # Cancelled before it was queued, or refused by a full queue: ended by the scheduler
    # already, so acked as well.
    held = accepted | set(reply.duplicates) | set(reply.cancelled) | set(reply.shed)
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
            await retry_later(ctx, RedeliveryPolicy.from_settings(ctx.settings), msg, classified)


async def shed_stale(
    ctx: ServiceContext, ready: list[tuple[Msg, ClassifiedRequest]]
) -> list[tuple[Msg, ClassifiedRequest]]:
    """Answer ``overloaded`` and settle each first delivery that waited in the ingress
    stream past ``classifier.max_ingress_wait_s``; return the rest.

    A request whose answer could not be sent (NATS away) is handed off as usual: it is
    served late rather than left unanswered.
    """
    bound = ctx.settings.classifier.max_ingress_wait_s
    kept: list[tuple[Msg, ClassifiedRequest]] = []
    for msg, classified in ready:
        delivered, age_s = delivery_of(msg)
        if delivered != 1 or age_s <= bound:
            kept.append((msg, classified))
            continue
        try:
            await reply_error(
                ctx.nc,
                ctx.subjects,
                service=NAME,
                code=OVERLOADED,
                reason=f"ingress_wait: {age_s:.0f} s in the ingress stream before the "
                f"classifier took it (bound {bound:g} s); retry later",
                request=classified.request,
            )
        except nats.errors.Error as exc:
            logger.warning("could not shed stale %s: %s", classified.request.request_id, exc)
            kept.append((msg, classified))
            continue
        await msg.term()  # answered: JetStream must not deliver it again
    return kept


async def retry_later(
    ctx: ServiceContext, policy: RedeliveryPolicy, msg: Msg, classified: ClassifiedRequest
) -> None:
    """A message the scheduler does not hold yet: nak it with the policy's wait, or, once
    the policy gives it up, answer its client ``unavailable`` and settle it for good."""
    delivered, age_s = delivery_of(msg)
    if not policy.gives_up(delivered, age_s):
        await msg.nak(delay=policy.delay_s(delivered))
        return
    await reply_error(
        ctx.nc,
        ctx.subjects,
        service=NAME,
        code=UNAVAILABLE,
        reason=f"not queued within {age_s:.0f} s ({delivered} attempts); retry later",
        request=classified.request,
    )
    await msg.term()  # answered: JetStream must not deliver it again


def delivery_of(msg: Msg) -> tuple[int, float]:
    """How often JetStream has delivered ``msg`` and how old it is (seconds since the
    stream stored it); (1, 0.0) for a message without JetStream metadata."""
    try:
        meta = msg.metadata
    except nats.errors.Error:  # not from a JetStream consumer (a test's plain message)
        return 1, 0.0
    age_s = (datetime.now(UTC) - meta.timestamp).total_seconds()
    return meta.num_delivered, max(0.0, age_s)
