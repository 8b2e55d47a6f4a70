"""Router shell: when a pool has queued work and its workers have room, pull and place.

Event-driven: a scheduler "ready" event, a request ending or a new heartbeat wakes the
placement loop; a short tick covers lost events. Which pulled request goes to which worker
is the pure :func:`services.router.placement_step.step`, which the simulator calls as well.
Each placement is a request/reply to the worker, whose acceptance is the end of dispatch;
a refusal or a silent worker sends the request back to the scheduler, so nothing is
dropped between services. A dispatch carries a lease (``proto/leases.py``), and the
requests of a worker gone silent are revoked from it before they are re-queued
(:mod:`.revocations`), so a worker that was only frozen runs none of them a second time.
A Redis that restarts empty gets the placements written back (:mod:`.store_loss`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry import trace
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode, encode, request_endings
from proto.messages import (
    Assignment,
    ClassifiedRequest,
    WorkerStats,
)
from services.router import placement_step
from services.router.dispatch import UNANSWERED, Dispatcher, Outcome
from services.router.placement import make_placer
from services.router.placement_step import PlacementRound, Pulled
from services.router.recovery import Recovery, Unsure
from services.router.registry import WorkerRegistry
from services.router.scheduler_link import NatsSchedulerLink, SchedulerLink
from services.router.store_loss import StoreLoss
from shared.bus import HOPS_KEY, add_hops
from shared.counters import DECISIONS, ERRORS
from shared.lifecycle import ServiceContext
from shared.loops import (
    MAX_BACKOFF_S,
    raise_if_cancelled,
    run_periodic,
    sleep_or_stop,
    wait_event,
)

__all__ = ["NAME", "RouterShell", "serve"]

NAME = "router"


logger = logging.getLogger(__name__)


class RouterShell:
    """Placement rounds: woken by ready pools, ended requests and heartbeats."""

    def __init__(
        self,
        ctx: ServiceContext,
        scheduler: SchedulerLink | None = None,
        *,
        tracer: trace.Tracer | None = None,
    ) -> None:
        """Place for the scheduler behind ``scheduler`` (default: over NATS)."""
        self._ctx = ctx
        self._scheduler = scheduler or NatsSchedulerLink(ctx)
        self._tracer = tracer or ctx.tracer
        self.placer = make_placer(ctx.settings.router.placer)
        self.registry = WorkerRegistry(ctx.settings.router.worker_timeout_s)
        self.dispatcher = Dispatcher(ctx, self.registry, self._tracer, NAME)
        self._wake = asyncio.Event()
        self._ready: set[str] = set()
        self._unrecorded: dict[str, bytes] = {}
        """Encoded Assignments of placed requests not yet written to Redis."""
        self._record_wake = asyncio.Event()
        self._outbox: dict[str, list[ClassifiedRequest]] = {}
        """Placed requests waiting for their worker's batch in flight to be answered."""
        self._senders: dict[str, set[asyncio.Task[None]]] = {}
        """Dispatch loops per worker with requests to send (up to ``batches_in_flight``)."""
        self._in_flight = ctx.settings.router.batches_in_flight
        self._heard_since = 0.0
        """Wall time since when this router's NATS connection has been up (inf while it is
        down): workers are timed from then at the earliest (``WorkerRegistry.expire``)."""
        self._store_loss = StoreLoss(ctx, self.registry)
        """Writes the placements back to a Redis that lost its data (:mod:`.store_loss`)."""
        self.recovery = Recovery(
            ctx,
            self.registry,
            self._scheduler,
            resend=self._resend,
            free=self.ended,
            service=NAME,
        )

    def mark_ready(self, pool_id: str) -> None:
        """The scheduler holds work for a pool."""
        self._ready.add(pool_id)
        self._wake.set()

    def ended(self, request_id: str) -> None:
        """A request ended: its slot is free, and its placement need not be recorded."""
        self._unrecorded.pop(request_id, None)
        if self.registry.ended(request_id) is not None:
            self._wake.set()

    async def subscribe(self, *, done: bool = True, ready: bool = True) -> list[Subscription]:
        """Heartbeats, ready events and completions.

        ``done=False`` and ``ready=False`` leave completions and ready events to the caller
        (:meth:`ended`, :meth:`mark_ready`): the co-located request path feeds both.
        """
        ctx = self._ctx

        async def on_stats(msg: Msg) -> None:
            with contextlib.suppress(DecodeError):
                stats = decode(msg.data, WorkerStats)
                self.registry.update(stats, time.time())
                self._wake.set()

        async def on_ready(msg: Msg) -> None:
            self.mark_ready(msg.subject.rsplit(".", 1)[-1])

        async def on_done(msg: Msg) -> None:
            with contextlib.suppress(DecodeError):
                for ended in request_endings(msg.data):
                    rid = getattr(ended, "request_id", None)
                    if rid:
                        self.ended(rid)

        subs = [await ctx.nc.subscribe(ctx.subjects.worker_stats_wildcard, cb=on_stats)]
        if ready:
            subs.append(await ctx.nc.subscribe(ctx.subjects.scheduler_ready_wildcard, cb=on_ready))
        if done:
            subs.append(await ctx.nc.subscribe(ctx.subjects.request_done_wildcard, cb=on_done))
        return subs

    async def place_round(self) -> None:
        """Re-queue orphans of silent workers, then pull and place for every ready pool."""
        now = time.time()
        if not self._ctx.nc.is_connected:
            self._heard_since = math.inf  # cut off: no heartbeat can reach us
        elif self._heard_since == math.inf:
            self._heard_since = now
        orphans = self.registry.expire(now, self._heard_since)
        if orphans:
            await self.recovery.requeue_orphans(orphans)
        for pool_id in self.registry.pools() & self._ready:
            if all(
                len(self._senders.get(w, ())) >= self._in_flight
                for w in self.registry.workers_of(pool_id)
            ):
                # Every worker of the pool still awaits its last batch's reply: what this
                # round placed would wait in the outboxes anyway. Placing when a worker is
                # free decides on more requests at once (fewer, larger rounds under load);
                # the mark stays and the sender that finishes wakes the loop.
                continue
            # Clear the mark before pulling, not after: a request the scheduler readies while
            # this round awaits its dispatches marks the pool again and is placed next round.
            # Clearing afterwards erased that mark, and such a request waited for the next
            # arrival or the scheduler's ready reminder (20-50 ms; docs/performance.md).
            self._ready.discard(pool_id)
            more = True  # a failed round keeps the mark: the next round retries the pool
            try:
                more = await self._place_pool(pool_id)
            finally:
                if more:
                    self._ready.add(pool_id)

    async def run(self) -> None:
        """Placement and recording until ``ctx.stop``."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._record_loop())
            tg.create_task(
                run_periodic(
                    self._ctx.stop,
                    self._ctx.settings.router.ended_audit_period_s,
                    self.audit_endings,
                    service=NAME,
                    name="audit",
                )
            )
            tg.create_task(
                run_periodic(
                    self._ctx.stop,
                    self._ctx.settings.router.store_check_period_s,
                    self.check_store,
                    service=NAME,
                    name="store",
                )
            )
            await self._place_loop()
            if self._senders:  # their accepted placements must still be recorded
                await asyncio.gather(
                    *(t for ts in self._senders.values() for t in ts), return_exceptions=True
                )
            self._record_wake.set()

    async def _record_loop(self) -> None:
        """Write placements to Redis off the placement loop, one batch at a time.

        The record serves recovery only (the worker already holds the request), so the
        next round need not wait for Redis; a request that ends first is never written.
        """
        ctx = self._ctx
        while True:
            await wait_event(self._record_wake, 1.0)
            raise_if_cancelled()
            self._record_wake.clear()
            if self._unrecorded:
                batch, self._unrecorded = self._unrecorded, {}
                try:
                    await self.record(batch)
                except Exception:  # loop boundary: only recovery data is at stake
                    ERRORS.labels(NAME, "loop_record").inc()
                    logger.exception("recording %d placements failed", len(batch))
            if ctx.stop.is_set() and not self._unrecorded:
                return

    async def _place_loop(self) -> None:
        """Placement rounds; a short tick covers lost events."""
        ctx = self._ctx
        tick = ctx.settings.router.tick_ms / 1000.0
        failures = 0
        while not ctx.stop.is_set():
            await wait_event(self._wake, tick)
            raise_if_cancelled()
            self._wake.clear()
            try:
                await self.place_round()
                failures = 0
            except Exception:  # loop boundary: a NATS/Redis outage must not end the router
                failures += 1
                ERRORS.labels(NAME, "loop_place").inc()
                if failures == 1:
                    logger.exception("placement round failed; retrying")
                await sleep_or_stop(ctx.stop, min(MAX_BACKOFF_S, 0.1 * 2**failures))

    async def _place_pool(self, pool_id: str) -> bool:
        """Pull and place for one pool; return whether the scheduler still holds work for it."""
        ctx, registry, placer = self._ctx, self.registry, self.placer
        now_model = ctx.clock.now()
        loads = registry.loads(pool_id, now_model)
        slots = sum(w.free_slots for w in loads)
        if slots == 0:
            return True
        pulled, queued = await self._scheduler.pull(pool_id, slots)
        if not pulled:
            return queued > 0
        pulled_at = time.time()
        by_id = {r.request.request_id: r for r in pulled}
        decision = placement_step.step(
            placer,
            PlacementRound(
                now_s=now_model,
                pulled=[
                    Pulled(
                        request_id=rid,
                        prompt_tokens=r.input_tokens,
                        predicted_output_tokens=r.predicted_output_tokens,
                        deadline_s=r.deadline_s,
                        remaining_s=r.lat_s,  # not started: T_remain is all of Lat_i
                        model=r.request.model,
                    )
                    for rid, r in by_id.items()
                ],
                workers=loads,
            ),
        )
        DECISIONS.labels(placer.name, pool_id).inc(len(decision.placed))
        # --- opt-in hop stamps (bench --hops): pulled ---
        if any(HOPS_KEY in r.trace for r in pulled):
            for rid, r in by_id.items():
                if HOPS_KEY in r.trace:
                    stamped = add_hops(r.trace, pull=pulled_at)
                    by_id[rid] = msgspec.structs.replace(r, trace=stamped)
        # --- end hop stamps ---
        # Take the slots now, then hand the requests to their workers' senders: the next
        # round can place while these dispatches are on the wire (a round no longer waits
        # a worker round trip), and the loads it sees already count them.
        sent = set()
        for rid, wid in decision.placed.items():
            # False: its ending (a cancel) came while the pull's reply was on the wire; it
            # is answered, so dispatching it would run it for nobody.
            if registry.placed(by_id[rid], wid, now_model):
                self._outbox.setdefault(wid, []).append(by_id[rid])
                sent.add(wid)
        self._start_senders(sent)
        unplaced = [by_id[rid] for rid in decision.unplaced]
        if unplaced:
            await self._scheduler.requeue(unplaced)
        return queued > 0 or bool(unplaced)

    def _start_senders(self, worker_ids: set[str]) -> None:
        """One new sender per worker and round at most: the first to run takes the whole
        outbox, so a second one started for the same round would find it empty."""
        for wid in worker_ids:
            senders = self._senders.setdefault(wid, set())
            if len(senders) < self._in_flight:
                senders.add(asyncio.create_task(self._send_loop(wid)))

    async def check_store(self) -> None:
        """Write the placements back if Redis lost its data
        (:meth:`.store_loss.StoreLoss.check`)."""
        await self._store_loss.check()

    async def adopt(self) -> int:
        """Take over the placements recorded by this router's previous run
        (:meth:`services.router.recovery.Recovery.adopt`)."""
        return await self.recovery.adopt()

    async def audit_endings(self) -> None:
        """Free placements whose ending went unheard
        (:meth:`services.router.recovery.Recovery.audit_endings`)."""
        await self.recovery.audit_endings()

    def _resend(self, by_worker: dict[str, list[ClassifiedRequest]]) -> None:
        for worker_id, requests in by_worker.items():
            self._outbox.setdefault(worker_id, []).extend(requests)
        self._start_senders(set(by_worker))

    async def _send_loop(self, worker_id: str) -> None:
        """Dispatch a worker's placed requests, one batch in flight at a time.

        Requests placed while a batch awaits its reply wait in the outbox and go together
        next (batching grows with load by itself, so a busy router sends fewer, larger
        batches, and an idle one sends each request at once). Accepted placements are
        recorded; refused or unanswered ones are released and re-queued.
        """
        try:
            while batch := self._outbox.pop(worker_id, None):
                # --- opt-in hop stamps (bench --hops): dispatch sent (after any wait for
                # this worker's previous batch, which counts as placement) ---
                if any(HOPS_KEY in r.trace for r in batch):
                    now = time.time()
                    batch = [
                        msgspec.structs.replace(r, trace=add_hops(r.trace, dispatch=now))
                        if HOPS_KEY in r.trace
                        else r
                        for r in batch
                    ]
                # --- end hop stamps ---
                placed = [(req, worker_id) for req in batch]
                try:
                    results = await self.dispatcher.dispatch_all(placed)
                except Exception:  # task boundary: the unanswered go back to the queue
                    ERRORS.labels(NAME, "dispatch_failed").inc(len(placed))
                    logger.exception("dispatching %d requests failed", len(placed))
                    results = [UNANSWERED] * len(placed)
                await self._settle_round(placed, results)
        finally:
            senders = self._senders.get(worker_id)
            if senders is not None:
                senders.discard(asyncio.current_task())
                if not senders:
                    del self._senders[worker_id]
            self._wake.set()  # a pool whose workers were all sending may be placed now

    async def _settle_round(
        self, placed: list[tuple[ClassifiedRequest, str]], results: list[Outcome]
    ) -> None:
        """Record accepted placements; re-queue refused ones; leave unanswered ones, and
        adopted ones their worker refused, to recovery
        (:meth:`services.router.recovery.Recovery.settle_unsure`): they may have run."""
        refused: list[ClassifiedRequest] = []
        unsure: list[Unsure] = []
        for (req, worker_id), held in zip(placed, results, strict=True):
            rid = req.request.request_id
            adopted = self.recovery.take_adopted(rid)
            if isinstance(held, Assignment):
                self.recovery.settled(rid)
                self._unrecorded[rid] = encode(held)
                self._record_wake.set()
            elif held is True:
                self.recovery.settled(rid)
            elif held is UNANSWERED or adopted:
                unsure.append((req, worker_id, held is UNANSWERED))
            elif self.registry.release(rid) is not None:
                # Only a placement still held goes back (it was not expired and re-queued).
                refused.append(req)
        if unsure:
            refused += await self.recovery.settle_unsure(unsure)
        if refused:
            try:
                await self._scheduler.requeue(refused)
            except Exception:  # the reaper re-queues them from Redis once they go stale
                ERRORS.labels(NAME, "requeue").inc(len(refused))
                logger.exception("re-queueing %d refused requests failed", len(refused))
            self._wake.set()

    async def record(self, assignments: dict[str, bytes]) -> None:
        """Write the placed requests' Assignments (the record only serves recovery)."""
        if not assignments:
            return
        keys = self._ctx.keys
        try:
            if self._scheduler.records_pull:
                # One round trip per placement round.
                await self._ctx.redis.hset(keys.dispatched, mapping=assignments)  # type: ignore[arg-type]
            else:
                pipe = self._ctx.redis.pipeline(transaction=True)
                pipe.hset(keys.dispatched, mapping=assignments)  # type: ignore[arg-type]
                pipe.hdel(keys.queued, *assignments)
                await pipe.execute()
        except RedisError as exc:
            logger.warning("could not record %d assignments in redis: %s", len(assignments), exc)


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    shell = RouterShell(ctx)
    subs = await shell.subscribe()
    await shell.adopt()
    try:
        await shell.run()
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
