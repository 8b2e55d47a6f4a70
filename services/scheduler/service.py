"""Scheduler shell: per-pool queues, stored in Redis, drained by routers that have room.

Durability: a submitted request is written to Redis (``queued``) before the classifier is
told "accepted"; a pulled request moves to ``dispatched`` (as an Assignment without a
worker) until the router records its worker or it ends. A restarted scheduler reloads its
queues from Redis; a pulled request that no router placed in time goes back to the queue.
A Redis that restarts empty gets the queues written back (:mod:`.store_loss`).

:class:`SchedulerShell` keeps the hand-offs (submit, pull, requeue, cancel, restore) and
the periodic loops; what they lean on is in its own module: the atomic store-new and the
requeue record (:mod:`.intake`), the memory of ended requests and the delete of their
records (:mod:`.endings`), the reaper and audit over the placement records
(:mod:`.reaper`), the NATS handlers (:mod:`.nats_subjects`), cancels (:mod:`.cancels`) and
the emergency ladder (:mod:`.ladder_shell`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry import trace
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode, encode, request_endings
from proto.messages import (
    UNPLACED_WORKER,
    Assignment,
    ClassifiedRequest,
    SubmitBatchReply,
)
from services.scheduler.cancels import CancelBook
from services.scheduler.ceiling import OVERLOADED_CODE, QUEUE_FULL, QUEUE_WAIT, Ceiling
from services.scheduler.endings import EndedMemory
from services.scheduler.intake import (
    CANCELLED_FIRST,
    REUSED,
    SEEN_CANCELLED,
    SEEN_QUEUED,
    STORED,
    UnconfirmedStores,
    queue_again,
    store_new,
)
from services.scheduler.ladder_shell import start_ladder
from services.scheduler.nats_subjects import serve_hand_offs
from services.scheduler.pool_queues import SchedulerState
from services.scheduler.reaper import Reaper
from services.scheduler.store_loss import StoreLoss
from shared.bus import tracing_active
from shared.counters import QUEUE_DEPTH
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic
from shared.replies import reply_error
from shared.store import as_bytes
from shared.telemetry import extract_context, request_attributes

__all__ = ["NAME", "UNPLACED_WORKER", "SchedulerShell", "serve"]

NAME = "scheduler"

logger = logging.getLogger(__name__)


class SchedulerShell:
    """The scheduler's hand-offs, callable in memory or served on NATS.

    The separate-process deployment serves them on ``scheduler.submit``/``pull``/``requeue``
    (:func:`serve`); the co-located request path (:mod:`greenserve.local.requestpath`) calls
    :meth:`submit` and :meth:`pull` directly from the classifier and the router in the same
    event loop. Durability is the same either way: a submitted request is in Redis before
    :meth:`submit` returns, so the ingress message is acked only after that.
    """

    def __init__(
        self,
        ctx: ServiceContext,
        *,
        on_ready: Callable[[str], Awaitable[None]] | None = None,
        tracer: trace.Tracer | None = None,
    ) -> None:
        """``on_ready(pool)`` tells routers a pool has work (default: ``scheduler.ready``)."""
        self._ctx = ctx
        self.state = SchedulerState(ctx.settings.scheduler.discipline)
        self._on_ready = on_ready or self._publish_ready
        self._tracer = tracer or ctx.tracer
        self._endings = EndedMemory(ctx)
        """Ended requests: a late requeue is dropped, their records deleted in a batch."""
        self._reaper = Reaper(ctx, requeue=self.requeue, ended=self.ended, service=NAME)
        self._cancels = CancelBook(ctx, NAME)
        self._unconfirmed = UnconfirmedStores()
        """Ids of store-new calls that raised: their redelivery may find them stored."""
        self._store_loss = StoreLoss(ctx, self.state)
        """Writes the queues back to a Redis that lost its data (:mod:`.store_loss`)."""
        cfg = ctx.settings.scheduler
        self._ceiling = Ceiling(cfg.max_queued_per_pool, cfg.max_queue_wait_s)
        """The bounded queues and the wait bound (:mod:`.ceiling`)."""

    async def _publish_ready(self, pool_id: str) -> None:
        await self._ctx.nc.publish(self._ctx.subjects.scheduler_ready(pool_id), b"")

    async def restore(self) -> int:
        """Rebuild the queues from Redis ``queued`` (after a restart); return how many."""
        held: list[ClassifiedRequest] = []
        for raw in (await self._ctx.redis.hgetall(self._ctx.keys.queued)).values():
            with contextlib.suppress(DecodeError):
                held.append(decode(as_bytes(raw), ClassifiedRequest))
        # A request cancelled while this scheduler was down is ended, not queued again.
        marked = await self._cancels.marked([r.request.request_id for r in held])
        cancelled = [r for r in held if r.request.request_id in marked]
        restored = 0
        for req in held:
            if req.request.request_id not in marked:
                self.state.push(req)
                self._ceiling.entered([req.request.request_id])
                restored += 1
        await self._end_cancelled(cancelled, "queued")
        if restored:
            logger.info("restored %d queued requests from redis", restored)
        return restored

    async def submit(self, requests: list[ClassifiedRequest]) -> SubmitBatchReply:
        """Store new requests (atomic seen-mark + store each) and queue them.

        A request id seen before is a ``duplicate`` (a redelivery of the same ingress
        message, or the same request published again) or, when the seen-mark names
        another ingress message with another request, ``reused`` (by its ingress
        sequence): the client sent a new request under an id it had used. A repeat of
        a request whose earlier call here raised but was stored all the same (a Redis
        timeout after the write) is queued now and ``accepted`` (:class:`UnconfirmedStores`).

        Raises:
            RedisError: nothing was confirmed; the caller must not ack (redelivery follows).
        """
        ids = [req.request.request_id for req in requests]
        try:
            fresh_flags = await store_new(self._ctx, requests)
        except RedisError:
            self._unconfirmed.failed(ids)  # it may have run all the same: see settle
            raise
        recovered = self._unconfirmed.settle(ids)
        accepted: list[str] = []
        duplicates: list[str] = []
        reused: list[int] = []
        cancelled: list[ClassifiedRequest] = []
        new: list[ClassifiedRequest] = []
        for req, fresh in zip(requests, fresh_flags, strict=True):
            rid = req.request.request_id
            if rid in recovered and fresh in (SEEN_QUEUED, SEEN_CANCELLED):
                # Stored by a call that raised here: never queued in memory, so not a
                # duplicate but this request's first arrival.
                logger.info("request %s was stored by a hand-off that failed; queueing it", rid)
                fresh = CANCELLED_FIRST if fresh == SEEN_CANCELLED else STORED
            if fresh == REUSED:
                reused.append(req.ingress_seq)
                continue
            if fresh in (0, SEEN_QUEUED, SEEN_CANCELLED):
                duplicates.append(rid)
                continue
            # The Redis mark covers cancels from before the script ran; the memory one that
            # this process heard while it ran (the cancel handler writes it before awaiting).
            if fresh == CANCELLED_FIRST or self._cancels.holds(rid):
                cancelled.append(req)
                continue
            new.append(req)
        # Stored and marked seen before the ceiling refuses any: a redelivery of a refused
        # one is then a duplicate, acked, not a second answer (:mod:`.ceiling`).
        admitted, refused = self._ceiling.admit(self.state, new)
        pools: set[str] = set()
        for req in admitted:
            rid = req.request.request_id
            if tracing_active(req.trace):
                with self._tracer.start_as_current_span(
                    "enqueue",
                    context=extract_context(req.trace),
                    attributes=request_attributes(rid),
                ):
                    self.state.push(req)
            else:  # a no-op span would cost more than the push itself
                self.state.push(req)
            accepted.append(rid)
            pools.add(req.pool_id)
        for pool_id in pools:
            QUEUE_DEPTH.labels(pool_id).set(len(self.state.queue(pool_id)))
            await self._on_ready(pool_id)
        await self._end_cancelled(cancelled, "submit")
        await self._shed(refused, QUEUE_FULL)
        return SubmitBatchReply(
            accepted=accepted,
            duplicates=duplicates,
            reused=reused,
            cancelled=[req.request.request_id for req in cancelled],
            shed=[req.request.request_id for req in refused],
        )

    async def _shed(self, requests: list[ClassifiedRequest], why: str) -> None:
        """End requests the ceiling refused or dropped with ``overloaded`` and forget them.

        A reply that cannot be sent is not retried (NATS is away: the client's own timeout
        answers it); the request is forgotten either way, as a cancelled one is.
        """
        for req in requests:
            with contextlib.suppress(nats.errors.Error):
                await reply_error(
                    self._ctx.nc,
                    self._ctx.subjects,
                    service=NAME,
                    code=OVERLOADED_CODE,
                    reason=self._ceiling.reason(why, req),
                    request=req.request,
                )
            self.ended(req.request.request_id)
        for pool_id in {req.pool_id for req in requests}:
            QUEUE_DEPTH.labels(pool_id).set(len(self.state.queue(pool_id)))

    async def shed_waiting(self) -> None:
        """End the queued requests that waited past ``scheduler.max_queue_wait_s``."""
        await self._shed(self._ceiling.expired(self.state), QUEUE_WAIT)

    async def cancel(self, request_id: str) -> bool:
        """A client cancelled a request: end it if queued here; remember the cancel.

        Returns whether it was queued here. One not queued may not have arrived yet (the
        mark and the memory end it at its hand-off) or may be on a worker (which heard
        the same cancel) or ended (nothing to do).
        """
        self._cancels.heard(request_id)  # before any await: see submit
        req = self.state.take(request_id)
        if req is not None:
            QUEUE_DEPTH.labels(req.pool_id).set(len(self.state.queue(req.pool_id)))
            await self._end_cancelled([req], "queued")
        await self._cancels.mark(request_id)
        return req is not None

    async def _end_cancelled(self, requests: list[ClassifiedRequest], stage: str) -> None:
        """End cancelled requests and forget them (their Redis records go in the next flush)."""
        if not requests:
            return
        await self._cancels.end(requests, stage)
        for req in requests:
            self.ended(req.request.request_id)
            if tracing_active(req.trace):
                # Its trace ends here, not at a worker: say so, failed, with the reason.
                span = self._tracer.start_span(
                    "cancelled",
                    context=extract_context(req.trace),
                    attributes={**request_attributes(req.request.request_id), "stage": stage},
                )
                span.set_status(trace.StatusCode.ERROR, f"cancelled by its client ({stage})")
                span.end()

    async def pull(
        self, pool_id: str, slots: int, *, record: bool = True
    ) -> tuple[list[ClassifiedRequest], int]:
        """Pop up to ``slots`` requests by the discipline; return them and the depth left.

        With ``record`` the requests move from ``queued`` to ``dispatched`` (worker ``-``)
        in Redis, so the reaper re-queues them if the router that pulled them dies. The
        co-located router passes False and records the placed requests itself, in one
        transaction after dispatch: pull and placement share this process, so a crash
        between them leaves the requests in ``queued`` and the restart restores them.
        """
        taken = self.state.pop(pool_id, slots, self._ctx.clock.now())
        if taken and record:
            now = time.time()
            held = {
                req.request.request_id: encode(
                    Assignment(request=req, worker_id=UNPLACED_WORKER, dispatched_at=now)
                )
                for req in taken
            }
            # Still one MULTI/EXEC, but two commands for the whole pull instead of two each.
            pipe = self._ctx.redis.pipeline(transaction=True)
            pipe.hset(self._ctx.keys.dispatched, mapping=held)  # type: ignore[arg-type]
            pipe.hdel(self._ctx.keys.queued, *held)
            try:
                await pipe.execute()
            except RedisError as exc:
                # Handing the requests over matters more than logging the move; only a
                # router crash during this Redis outage could now lose them.
                logger.warning("could not record %d pulled requests in redis: %s", len(taken), exc)
        depth = len(self.state.queue(pool_id))
        QUEUE_DEPTH.labels(pool_id).set(depth)
        return taken, depth

    async def requeue(self, requests: list[ClassifiedRequest]) -> None:
        """Take requests back (unplaced, refused, orphaned, drained), unless they ended.

        A dispatch whose reply was lost (a NATS restart) comes back here after the router's
        timeout although the worker ran it; if its end was heard meanwhile, queueing it
        again would run it twice.

        Refused or unplaced after its client cancelled it, a request is ended instead of
        queued: by the cancel memory, or by the Redis mark for a cancel heard before this
        scheduler (re)started (one round trip for the batch). The mark is read first: the
        checks after it and the push run without an ``await`` between them, so a cancel
        heard while the mark is read is in the memory, and one heard later finds the
        request queued.
        """
        marked = await self._cancels.marked_now([r.request.request_id for r in requests])
        late = [r for r in requests if r.request.request_id in self._endings]
        if late:
            logger.info("dropping %d requeued requests that already ended", len(late))
            requests = [r for r in requests if r.request.request_id not in self._endings]
        requests, cancelled = self._cancels.split(requests, marked)
        self._ceiling.entered(r.request.request_id for r in requests)
        await queue_again(self._ctx, self.state, requests, self._on_ready)
        await self._end_cancelled(cancelled, "requeue")

    def ended(self, request_id: str) -> None:
        """A request ended (completion or error): forget it (Redis in the next flush)."""
        self._endings.ended(request_id)
        self._ceiling.ended(request_id)
        # An error can end a request that is still queued (e.g. shed by the ladder).
        self.state.remove(request_id)

    async def forget_ended(self) -> None:
        """Delete ended requests from Redis, batched (:meth:`.endings.EndedMemory.forget`)."""
        await self._endings.forget()

    async def sweep_records(self) -> None:
        """The reaper and, once per audit period, the audit (:meth:`.reaper.Reaper.sweep`)."""
        await self._reaper.sweep()

    async def audit_endings(self, records: list[Assignment] | None = None) -> None:
        """Forget the placement records of requests their workers ended unheard
        (:meth:`.reaper.Reaper.audit_endings`; ``records`` when just read)."""
        await self._reaper.audit_endings(records)

    async def check_store(self) -> int:
        """Write the queues back if Redis lost its data (:meth:`.store_loss.StoreLoss.check`)."""
        return await self._store_loss.check()

    async def remind(self) -> None:
        """Repeat the ready signal of every pool with a backlog (covers lost signals)."""
        for pool_id in self.state.backlog():
            await self._on_ready(pool_id)

    async def serve_subjects(self, *, requeue_only: bool = False) -> list[Subscription]:
        """Serve submit, pull and requeue on NATS (queue ``scheduler``; :mod:`.nats_subjects`).

        Cancels (``cancel.client.*``) are heard in both modes. ``requeue_only`` serves just
        ``scheduler.requeue`` (workers hand drained requests back there): the co-located
        request path submits and pulls by method call, and its identity may not subscribe
        to the other two (``shared.security.nats_acl``).
        """
        return await serve_hand_offs(self._ctx, self, requeue_only=requeue_only, service=NAME)

    async def run(self, subs: list[Subscription]) -> None:
        """Periodic work (ready reminders, forget, ladder, reaper) until ``ctx.stop``."""
        ctx, cfg = self._ctx, self._ctx.settings.scheduler
        ladder_tick: Callable[[], Awaitable[None]] | None = None
        if cfg.ladder:
            _ladder, ladder_subs, ladder_tick = await start_ladder(ctx, self.state, self._on_ready)
            subs.extend(ladder_subs)
        period = cfg.ready_period_ms / 1000.0
        async with asyncio.TaskGroup() as tg:
            tg.create_task(run_periodic(ctx.stop, period, self.remind, service=NAME, name="ready"))
            tg.create_task(
                run_periodic(ctx.stop, 0.05, self.forget_ended, service=NAME, name="forget")
            )
            if ladder_tick is not None:  # DynamoLLM's emergency ladder, each ready period
                tg.create_task(
                    run_periodic(ctx.stop, period, ladder_tick, service=NAME, name="ladder")
                )
            tg.create_task(
                run_periodic(ctx.stop, 1.0, self.sweep_records, service=NAME, name="records")
            )
            # A tenth of the bound: a request is shed at most 10 % past it.
            tg.create_task(
                run_periodic(
                    ctx.stop,
                    min(1.0, cfg.max_queue_wait_s / 10),
                    self.shed_waiting,
                    service=NAME,
                    name="ceiling",
                )
            )
            tg.create_task(self._watch_store())

    async def _watch_store(self) -> None:
        """The store check every ``scheduler.store_check_period_s`` (wall)."""

        async def check() -> None:
            await self.check_store()

        period = self._ctx.settings.scheduler.store_check_period_s
        await run_periodic(self._ctx.stop, period, check, service=NAME, name="store")


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    shell = SchedulerShell(ctx)
    await shell.restore()

    async def on_done(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            for ended in request_endings(msg.data):
                rid = getattr(ended, "request_id", None)
                if rid:
                    shell.ended(rid)

    subs = await shell.serve_subjects()
    subs.append(await ctx.nc.subscribe(ctx.subjects.request_done_wildcard, cb=on_done))
    try:
        await shell.run(subs)
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
