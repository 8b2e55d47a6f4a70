"""Router shell: when a pool has queued work and its workers have room, pull and place.

Event-driven: a scheduler "ready" event, a request ending or a new heartbeat wakes the
placement loop; a short tick covers lost events. Each placement is a request/reply to the
worker, whose acceptance is the end of dispatch; a refusal or a silent worker sends the
request back to the scheduler, so nothing is dropped between services.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import nats.errors
from nats.aio.msg import Msg
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode, decode_any, encode
from proto.messages import (
    Assignment,
    ClassifiedRequest,
    DispatchReply,
    PullReply,
    PullRequest,
    RequeueRequest,
    SubmitReply,
    WorkerStats,
)
from services.router.placement import Candidate, Placer, make_placer
from services.router.registry import WorkerRegistry
from shared.bus import request, tracing_active
from shared.counters import DECISIONS, ERRORS
from shared.lifecycle import ServiceContext
from shared.loops import MAX_BACKOFF_S, sleep_or_stop
from shared.telemetry import extract_context

__all__ = ["NAME", "serve"]

NAME = "router"

logger = logging.getLogger(__name__)


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    cfg = ctx.settings.router
    placer = make_placer(cfg.placer)
    registry = WorkerRegistry(cfg.worker_timeout_s)
    wake = asyncio.Event()
    ready: set[str] = set()

    async def on_stats(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            stats = decode(msg.data, WorkerStats)
            registry.update(stats, time.time())
            wake.set()

    async def on_ready(msg: Msg) -> None:
        ready.add(msg.subject.rsplit(".", 1)[-1])
        wake.set()

    async def on_done(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            rid = getattr(decode_any(msg.data), "request_id", None)
            if rid and registry.ended(rid) is not None:
                wake.set()

    subs = [
        await ctx.nc.subscribe(ctx.subjects.worker_stats_wildcard, cb=on_stats),
        await ctx.nc.subscribe(ctx.subjects.scheduler_ready_wildcard, cb=on_ready),
        await ctx.nc.subscribe(ctx.subjects.request_done, cb=on_done),
    ]

    async def place_round() -> None:
        orphans = registry.expire(time.time())
        if orphans:
            logger.warning("%d requests orphaned by silent workers; re-queueing", len(orphans))
            await _requeue(ctx, [o.request for o in orphans])
        for pool_id in registry.pools() & ready:
            more = await _place_pool(ctx, placer, registry, pool_id)
            if not more:
                ready.discard(pool_id)

    tick = cfg.tick_ms / 1000.0
    failures = 0
    try:
        while not ctx.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), tick)
            wake.clear()
            try:
                await place_round()
                failures = 0
            except Exception:  # loop boundary: a NATS/Redis outage must not end the router
                failures += 1
                ERRORS.labels(NAME, "loop_place").inc()
                if failures == 1:
                    logger.exception("placement round failed; retrying")
                await sleep_or_stop(ctx.stop, min(MAX_BACKOFF_S, 0.1 * 2**failures))
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def _place_pool(
    ctx: ServiceContext, placer: Placer, registry: WorkerRegistry, pool_id: str
) -> bool:
    """Pull and place for one pool; return whether the scheduler still holds work for it."""
    now_model = ctx.clock.now()
    loads = registry.loads(pool_id, now_model)
    slots = sum(w.free_slots for w in loads)
    if slots == 0:
        return True
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
        return True
    if not reply.requests:
        return reply.queued > 0
    by_id = {r.request.request_id: r for r in reply.requests}
    candidates = [
        Candidate(
            request_id=rid,
            prompt_tokens=r.input_tokens,
            predicted_output_tokens=r.predicted_output_tokens,
            laxity_s=r.deadline_s - now_model - r.lat_s,
        )
        for rid, r in by_id.items()
    ]
    pairs = placer.place(candidates, loads)
    DECISIONS.labels(placer.name, pool_id).inc(len(pairs))
    placed_ids = {rid for rid, _ in pairs}
    results = await asyncio.gather(
        *(_dispatch(ctx, registry, by_id[rid], worker_id, now_model) for rid, worker_id in pairs)
    )
    unplaced = [r for rid, r in by_id.items() if rid not in placed_ids]
    unplaced += [by_id[rid] for (rid, _), held in zip(pairs, results, strict=True) if held is None]
    assignments = {
        a.request.request.request_id: encode(a) for a in results if isinstance(a, Assignment)
    }
    if assignments:
        try:
            # One round trip per placement round; the record only serves recovery.
            await ctx.redis.hset(ctx.keys.dispatched, mapping=assignments)  # type: ignore[arg-type]
        except RedisError as exc:
            logger.warning("could not record %d assignments in redis: %s", len(assignments), exc)
    if unplaced:
        await _requeue(ctx, unplaced)
    return reply.queued > 0 or bool(unplaced)


async def _dispatch(
    ctx: ServiceContext,
    registry: WorkerRegistry,
    req: ClassifiedRequest,
    worker_id: str,
    now_model: float,
) -> Assignment | bool | None:
    """Hand one request to a worker: its Assignment, True if it already ended, None if refused."""
    rid = req.request.request_id
    # A no-op span still costs a context attach and a header extraction per request.
    span: contextlib.AbstractContextManager[object] = (
        ctx.tracer.start_as_current_span(
            "dispatch",
            context=extract_context(req.trace),
            attributes={"request.id": rid, "worker.id": worker_id},
        )
        if tracing_active(req.trace)
        else contextlib.nullcontext()
    )
    with span:
        try:
            reply = await request(
                ctx.nc,
                ctx.subjects.worker_dispatch(worker_id),
                req,
                DispatchReply,
                ctx.settings.nats.request_timeout_s,
            )
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, DecodeError) as exc:
            ERRORS.labels(NAME, "dispatch_failed").inc()
            logger.warning("dispatch of %s to %s failed: %s", rid, worker_id, exc)
            return None
    if not reply.accepted:
        logger.info("worker %s refused %s: %s", worker_id, rid, reply.reason)
        return None
    if not registry.placed(req, worker_id, now_model):
        return True  # it already finished; nothing left to record
    return Assignment(request=req, worker_id=worker_id, dispatched_at=reply.accepted_at)


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
