"""Classifier shell: take from the durable ingress stream, classify, hand off, then ack.

A message is acked only after the scheduler confirmed it stored the request, so a
classifier killed at any point loses nothing: JetStream redelivers the unacked message to
another (or the restarted) classifier, and the scheduler drops the duplicate by id. The
id is scoped by the client (``ingress_identity``) and the seen-mark keeps the message's
stream sequence, so a redelivery (same sequence) is acked silently while a client's
reuse of its own id (another sequence) is answered ``duplicate_request_id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
import nats.errors
from nats.aio.msg import Msg
from opentelemetry import trace
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode, encode, request_endings
from proto.messages import (
    ClassifiedRequest,
    Completion,
    Plan,
    Request,
    SubmitBatch,
    SubmitBatchReply,
)
from services.classifier.classes import default_slos, make_predictor, scheme_by_name
from services.classifier.ingress_consumer import (
    IngressInbox,
    consumer_config,
    ensure_ingress_consumer,
    subscribe_inbox,
)
from services.classifier.ingress_identity import (
    admit_bound_request,
    error_reply_target,
    refuse_reused_id,
)
from services.classifier.pipeline import ClassifierCore
from shared.bus import (
    HOPS_HEADER,
    add_hops,
    ensure_ingress_stream,
    request,
    retry_on_timeout,
    tracing_active,
)
from shared.counters import ERRORS, MESSAGES, REQUESTS
from shared.errors import RequestRejectedError
from shared.lifecycle import ServiceContext
from shared.loops import sleep_or_stop
from shared.plan_watch import watch_plan
from shared.replies import reply_error
from shared.telemetry import inject_headers, request_attributes, span_from_headers

__all__ = [
    "HANDOFF_ERRORS",
    "NAME",
    "REPLY_HEADER",
    "UNCLASSIFIABLE",
    "Submit",
    "build_core",
    "consume",
    "nats_submit",
    "plan_follower",
    "serve",
]

NAME = "classifier"
MAX_BATCHES_IN_FLIGHT = 1
"""Ingress batches being classified and handed off at once.

One: what is pushed during a batch's hand-off (its Redis round trip) becomes the next
batch, so batches grow with the load. With four in flight (the pull loop's setting) pushed
messages went one per batch at 1,000-2,000 req/s, and each batch costs a Redis script call
and a placement round: alternated runs (4 pairs, docs/performance.md round 4) gave p50
25-30 ms against 31-39 ms at 1,600 req/s and 38-55 against 43-79 ms at 2,000, the same at
400-1,000 req/s."""
_V1_TOKENS, _V1_STREAM_SEQ = 9, 5
_V2_TOKENS, _V2_STREAM_SEQ = 12, 7
UNCLASSIFIABLE = "unclassifiable"
"""Error code: the classifier's configuration cannot classify this request."""
REPLY_HEADER = "Gs-Reply"
"""Clients also put their reply subject in this header, so even an undecodable payload
gets an error reply."""

logger = logging.getLogger(__name__)


def build_core(ctx: ServiceContext) -> ClassifierCore:
    """Build the pure core from settings."""
    cfg = ctx.settings.classifier
    scheme = scheme_by_name(cfg.scheme)
    tokenize = None
    if cfg.tokenizer_path:
        from services.classifier.tokenizer import load_tokenizer

        tokenize = load_tokenizer(cfg.tokenizer_path)
    return ClassifierCore(
        scheme=scheme,
        slos=default_slos(scheme),
        predictor=make_predictor(cfg.predictor, scheme=scheme),
        models=cfg.models,
        max_context_tokens=cfg.max_context_tokens,
        alpha_llf=cfg.alpha_llf,
        default_ttft_ms=cfg.default_ttft_ms,
        default_tbt_ms=cfg.default_tbt_ms,
        tokenize=tokenize,
    )


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


def plan_follower(core: ClassifierCore) -> Callable[[Plan], None]:
    """Callback for :func:`shared.plan_watch.watch_plan` that keeps ``core`` on the plan."""

    def on_plan(plan: Plan) -> None:
        scheme = scheme_by_name(plan.scheme) if plan.scheme != core.scheme.name else None
        core.update_plan(plan, scheme)
        logger.info("following plan epoch %d (%d pools)", plan.epoch, len(plan.pools))

    return on_plan


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    core = build_core(ctx)
    subs = [await watch_plan(ctx, plan_follower(core))]

    async def on_done(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            for done in request_endings(msg.data):
                if isinstance(done, Completion):
                    core.observe(done.input_tokens, done.output_tokens)

    subs.append(await ctx.nc.subscribe(ctx.subjects.request_done_wildcard, cb=on_done))
    try:
        await consume(ctx, core, nats_submit(ctx), ctx.tracer)
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def consume(
    ctx: ServiceContext, core: ClassifierCore, submit: Submit, tracer: trace.Tracer
) -> None:
    """Take pushed ingress messages in batches, classify, hand off by ``submit``, ack."""
    nats_cfg = ctx.settings.nats
    await ensure_ingress_stream(ctx.js, ctx.subjects)
    config = consumer_config(
        ctx.subjects, ack_wait_s=nats_cfg.ack_wait_s, max_deliver=nats_cfg.max_deliver
    )
    await retry_on_timeout(
        lambda: ensure_ingress_consumer(ctx.js, ctx.subjects, config),
        "creating the ingress consumer",
    )
    await _await_first_plan(ctx, core)
    inbox = IngressInbox()
    sub = await subscribe_inbox(ctx.js, ctx.subjects, inbox)
    batch = ctx.settings.classifier.fetch_batch
    slots = asyncio.Semaphore(MAX_BATCHES_IN_FLIGHT)
    handling: set[asyncio.Task[None]] = set()

    async def handle(msgs: list[Msg], fetched_at: float) -> None:
        try:
            await _handle_batch(ctx, core, msgs, submit, tracer, fetched_at)
        except Exception as exc:  # batch boundary: unacked messages are redelivered
            # An ack lost in an outage is harmless: JetStream redelivers, the scheduler dedups.
            ERRORS.labels(NAME, "handle").inc()
            logger.warning("handling an ingress batch failed: %s", exc)
        finally:
            slots.release()

    async def close_on_stop() -> None:
        await ctx.stop.wait()
        inbox.close()

    closer = asyncio.create_task(close_on_stop())
    try:
        while True:
            await slots.acquire()
            msgs = await inbox.take(batch)
            if not msgs:  # closed: stopping
                slots.release()
                break
            task = asyncio.create_task(handle(msgs, time.time()))
            handling.add(task)
            task.add_done_callback(handling.discard)
    finally:
        closer.cancel()
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
        # Delivered but never classified: hand them back now rather than after ack_wait.
        for msg in inbox.drain():
            with contextlib.suppress(nats.errors.Error):
                await msg.nak()
        if handling:  # let started hand-offs finish: they ack what the scheduler stored
            await asyncio.gather(*handling, return_exceptions=True)


async def _await_first_plan(ctx: ServiceContext, core: ClassifierCore) -> None:
    """Wait (bounded) for the first plan before fetching from the ingress stream.

    The plan reaches the classifier a moment after the planner stores it, so a request
    fetched in between would be refused ``no_plan`` although a plan exists; unfetched, it
    simply waits in the durable stream. After ``plan_wait_s`` without any plan the
    classifier fetches anyway, and requests get the clear ``no_plan`` error.
    """
    deadline = time.monotonic() + ctx.settings.classifier.plan_wait_s
    while not core.has_plan and time.monotonic() < deadline and not ctx.stop.is_set():
        await sleep_or_stop(ctx.stop, 0.05)
    if not core.has_plan:
        logger.warning(
            "no plan after %.0f s; requests are refused no_plan until one comes",
            ctx.settings.classifier.plan_wait_s,
        )


async def _classify(
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
        if seq := _stream_seq(msg):
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


def _stream_seq(msg: Msg) -> int:
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


async def _handle_batch(
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
        classified = await _classify(ctx, core, msg, tracer)
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
