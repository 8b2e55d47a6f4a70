"""Classifier shell: take from the durable ingress stream, classify, hand off, then ack.

A message is acked only after the scheduler confirmed it stored the request, so a
classifier killed at any point loses nothing: JetStream redelivers the unacked message to
another (or the restarted) classifier, and the scheduler drops the duplicate by id. The
id is scoped by the client (``ingress_identity``) and the seen-mark keeps the message's
stream sequence, so a redelivery (same sequence) is acked silently while a client's
reuse of its own id (another sequence) is answered ``duplicate_request_id``.

This module owns the ingress loop: building the core, following the plan, waiting for the
first one, and taking pushed messages in batches (one batch in flight). One message's
decoding, checks and classification are in :mod:`.classify_message`; a batch's hand-off to
the scheduler and its ack or nak in :mod:`.handoff`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import nats.errors
from nats.aio.msg import Msg
from opentelemetry import trace

from proto.codec import DecodeError, request_endings
from proto.messages import Completion, Plan
from services.classifier.classify_message import NAME, REPLY_HEADER, UNCLASSIFIABLE
from services.classifier.handoff import HANDOFF_ERRORS, Submit, handle_batch, nats_submit
from services.classifier.ingress_consumer import (
    IngressInbox,
    consumer_config,
    ensure_ingress_consumer,
    subscribe_inbox,
)
from services.classifier.pipeline import ClassifierCore
from services.classifier.predictors import make_predictor
from shared.bus import ensure_ingress_stream, retry_on_timeout
from shared.counters import ERRORS
from shared.domain.classes import default_slos, scheme_by_name
from shared.lifecycle import ServiceContext
from shared.loops import sleep_or_stop
from shared.model_context import context_limits
from shared.plan_watch import watch_plan
from shared.stream_keeper import ensure_consumer_exists, keep_jetstream

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

MAX_BATCHES_IN_FLIGHT = 1
"""Ingress batches being classified and handed off at once.

One: what is pushed during a batch's hand-off (its Redis round trip) becomes the next
batch, so batches grow with the load. With four in flight (the pull loop's setting) pushed
messages went one per batch at 1,000-2,000 req/s, and each batch costs a Redis script call
and a placement round: alternated runs (4 pairs; docs/performance.md, "One ingress batch in
flight") gave p50 25-30 ms against 31-39 ms at 1,600 req/s and 38-55 against 43-79 ms at
2,000, the same at 400-1,000 req/s."""

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
        model_contexts=context_limits(cfg.models, cfg.max_context_tokens),
    )


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
    replicas = nats_cfg.replicas
    await ensure_ingress_stream(ctx.js, ctx.subjects, replicas=replicas)
    config = consumer_config(
        ctx.subjects,
        ack_wait_s=nats_cfg.ack_wait_s,
        max_deliver=nats_cfg.max_deliver,
        replicas=replicas,
    )
    await retry_on_timeout(
        lambda: ensure_ingress_consumer(ctx.js, ctx.subjects, config),
        "creating the ingress consumer",
    )
    await _await_first_plan(ctx, core)
    inbox = IngressInbox()
    sub = await subscribe_inbox(ctx.js, ctx.subjects, inbox)
    # A server back without its store has neither: the subscription above stays bound to
    # the deliver subject, so a consumer created again delivers to it.
    check_s = nats_cfg.jetstream_check_s
    keeper = asyncio.create_task(
        keep_jetstream(
            ctx.nc,
            [
                (
                    "ingress stream",
                    lambda: ensure_ingress_stream(
                        ctx.js, ctx.subjects, within_s=check_s, replicas=replicas
                    ),
                ),
                (
                    "ingress consumer",
                    lambda: ensure_consumer_exists(ctx.js, ctx.subjects.ingress_stream, config),
                ),
            ],
            ctx.stop,
            service=NAME,
            check_s=check_s,
        )
    )
    batch = ctx.settings.classifier.fetch_batch
    slots = asyncio.Semaphore(MAX_BATCHES_IN_FLIGHT)
    handling: set[asyncio.Task[None]] = set()

    async def handle(msgs: list[Msg], fetched_at: float) -> None:
        try:
            await handle_batch(ctx, core, msgs, submit, tracer, fetched_at)
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
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
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
