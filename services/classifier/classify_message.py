"""One ingress message to one classified request, or to an error reply that settles it.

Everything decided about a single message lives here: decoding it, binding its client id
to its sender (``ingress_identity``), checking its reply subject, classifying it with the
pure core, carrying its ingress sequence and trace context along, and validating what will
be handed off. A message that fails is answered and acked or terminated on its own, so one
bad request never fails the batch it came in (:mod:`.handoff`).
"""

from __future__ import annotations

import contextlib
import logging
import time

import msgspec
from nats.aio.msg import Msg
from opentelemetry import trace

from proto.codec import DecodeError, decode, encode
from proto.messages import ClassifiedRequest, Request
from services.classifier.ingress_identity import admit_bound_request, error_reply_target
from services.classifier.pipeline import ClassifierCore
from shared.bus import tracing_active
from shared.counters import MESSAGES
from shared.errors import RequestRejectedError
from shared.lifecycle import ServiceContext
from shared.replies import reply_error
from shared.telemetry import inject_headers, request_attributes, span_from_headers

__all__ = ["NAME", "REPLY_HEADER", "UNCLASSIFIABLE", "classify_message", "stream_seq"]

NAME = "classifier"
"""The service's name in its error replies and counters (re-exported by :mod:`.service`)."""
_V1_TOKENS, _V1_STREAM_SEQ = 9, 5
_V2_TOKENS, _V2_STREAM_SEQ = 12, 7
UNCLASSIFIABLE = "unclassifiable"
"""Error code: the classifier's configuration cannot classify this request."""
REPLY_HEADER = "Gs-Reply"
"""Clients also put their reply subject in this header, so even an undecodable payload
gets an error reply."""

logger = logging.getLogger(__name__)


async def classify_message(
    ctx: ServiceContext, core: ClassifierCore, msg: Msg, tracer: trace.Tracer
) -> ClassifiedRequest | None:
    """Decode and classify one message; answer and settle it here when it is rejected."""
    try:
        req = decode(msg.data, Request)
    except DecodeError as exc:
        reply_to = error_reply_target(
            ctx.subjects, msg.subject, (msg.headers or {}).get(REPLY_HEADER)
        )
        await reply_error(
            ctx.nc,
            ctx.subjects,
            service=NAME,
            code="malformed",
            reason=str(exc),
            reply_subject=reply_to,
        )
        await msg.term()  # permanent: never redeliver a malformed message
        return None
    MESSAGES.labels(NAME, "Request").inc()
    if (bound := await admit_bound_request(ctx.nc, ctx.subjects, msg, req)) is None:
        return None  # its client id is not its sender's: answered, counted, settled
    req = bound
    if not req.reply_subject.startswith(ctx.subjects.client_prefix):
        # Never publish to a subject the client chose outside its own space (plan, workers).
        await reply_error(
            ctx.nc,
            ctx.subjects,
            service=NAME,
            code="bad_reply_subject",
            reason=f"reply subject must start with {ctx.subjects.client_prefix}",
        )
        await msg.term()
        return None
    traced = tracing_active(msg.headers)
    span: contextlib.AbstractContextManager[object] = (
        span_from_headers(tracer, "classify", msg.headers, **request_attributes(req.request_id))
        if traced
        else contextlib.nullcontext()  # a no-op span costs more than classifying
    )
    with span:
        try:
            now = time.time()
            # A client clock ahead of ours must not push the arrival (and deadline) into the
            # future; a request that waited in the stream keeps its real, earlier arrival.
            arrival_wall = min(req.sent_at, now + ctx.settings.classifier.max_clock_skew_s)
            classified = core.classify(
                req, arrival_s=ctx.clock.model_at(arrival_wall), now_wall=now
            )
        except RequestRejectedError as exc:
            await reply_error(
                ctx.nc, ctx.subjects, service=NAME, code=exc.code, reason=exc.reason, request=req
            )
            await msg.ack()
            return None
        except Exception as exc:  # message boundary: the core is pure, a retry fails again
            # E.g. the trace-replay ``oracle`` predictor given a request without a known
            # output length. Raised, it failed the whole batch: every request in it waited
            # for redelivery and came back with this one, until max_deliver dropped them.
            logger.warning("could not classify %s: %r", req.request_id, exc)
            await reply_error(
                ctx.nc,
                ctx.subjects,
                service=NAME,
                code=UNCLASSIFIABLE,
                reason=f"{type(exc).__name__}: {exc}",
                request=req,
            )
            await msg.term()
            return None
        # The ingress sequence lets the scheduler tell a redelivery from a reused id; the
        # trace context (if traced) must travel with the request through the queue.
        changes: dict[str, object] = {}
        if seq := stream_seq(msg):
            changes["ingress_seq"] = seq
        if traced:
            changes["trace"] = inject_headers()
        if changes:
            classified = msgspec.structs.replace(classified, **changes)
    try:
        # Validate what we hand off, one request at a time: a value the scheduler would
        # refuse must fail here, alone, instead of poisoning the whole submit batch.
        decode(encode(classified), ClassifiedRequest)
    except DecodeError as exc:
        await reply_error(
            ctx.nc, ctx.subjects, service=NAME, code="invalid", reason=str(exc), request=req
        )
        await msg.term()
        return None
    return classified


def stream_seq(msg: Msg) -> int:
    """The message's sequence in the ingress stream (0 when it did not come from one).

    Read from the ack subject directly: ``msg.metadata`` builds a dataclass and a datetime
    per message (≈ 3 % of the request path's CPU at 1,500 req/s). Layouts as nats-py
    parses them: ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``
    and, with a domain and account hash, the same with ``sseq`` at token 7.
    """
    tokens = (msg.reply or "").split(".")
    if tokens[:2] != ["$JS", "ACK"]:
        return 0
    if len(tokens) == _V1_TOKENS:
        position = _V1_STREAM_SEQ
    elif len(tokens) >= _V2_TOKENS - 1:  # the trailing random token is optional
        position = _V2_STREAM_SEQ
    else:
        return 0
    try:
        return int(tokens[position])
    except ValueError:
        return 0
