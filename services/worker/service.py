"""Worker shim: one engine backend behind the dispatch subject.

The shim owns the bus; a backend (:mod:`services.worker.backend`) owns the engine: ``sim``
runs the calibrated engine model in-process in model time sped up by ``clock.speedup``,
``instant`` completes every request at once (control-plane benchmarks), ``vllm`` drives a
vLLM server (or ``greenserve sim-engine``) over HTTP. Tokens stream to the client's reply
subject, the first at once and later ones coalesced; completions also go to
``request.done``. The worker registers in Redis with a heartbeat TTL, and on shutdown stops
accepting, lets running requests finish within the shutdown timeout, hands the rest back
to the scheduler, and deregisters. Under a MILP plan a worker beyond its pool's planned
instances parks (:mod:`services.planner.parking`): it refuses new dispatches, finishes what
it has and idles until the plan needs it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict

import msgspec
import nats.errors
from nats.aio.msg import Msg
from opentelemetry import context as otel_context
from prometheus_client import Histogram
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode, encode
from proto.messages import (
    ClassifiedRequest,
    ClockCommand,
    ClockReply,
    Completion,
    CompletionBatch,
    DispatchBatch,
    DispatchBatchReply,
    DispatchReply,
    Plan,
    RequeueRequest,
    SubmitReply,
    WorkerStats,
    client_request_id,
)
from services.planner.parking import PlanFollower
from services.worker.admission_gate import REFUSAL_REASON, AdmissionGate, limits_of
from services.worker.backend import BackendRefusalError, OutputBatch, WorkerBackend
from services.worker.co2 import RegionCarbon
from services.worker.ended_log import EndedLog
from services.worker.factory import build_backend
from services.worker.outbox import ReplyOutbox
from services.worker.state_publisher import PREDICTIVE_MODE, publish_states
from services.worker.streams import StreamBook
from shared.bus import HOPS_HEADER, HOPS_KEY, request, tracing_active
from shared.bus import serve as serve_subject
from shared.cancels import CANCELLED_CODE, CancelMemory, cancelled_id
from shared.counters import (
    CANCELLED,
    ERRORS,
    GPU_CLOCK_MHZ,
    GPU_CO2_G,
    GPU_ENERGY_J,
    GPU_POWER_W,
    REQUEST_LATENCY_S,
)
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic, wait_event
from shared.plan_watch import watch_plan
from shared.replies import reply_error
from shared.telemetry import request_attributes

__all__ = ["NAME", "WorkerShim", "serve"]

NAME = "worker"

logger = logging.getLogger(__name__)

DONE_BATCH_MAX = 4096
"""Most completions in one ``request.done`` event (the message's own limit)."""
FINISHED_MEMORY = 4096
"""Finished requests a worker remembers, to answer a repeated dispatch without a rerun."""


class WorkerShim:
    """Talks to the bus on behalf of one engine backend (the backend's output sink)."""

    def __init__(self, ctx: ServiceContext, backend: WorkerBackend) -> None:
        self._ctx = ctx
        self._cfg = ctx.settings.worker
        self._done_subject = ctx.subjects.request_done_worker(
            self._cfg.node_id, self._cfg.worker_id
        )
        self._stats_subject = ctx.subjects.worker_stats(
            self._cfg.pool_id, self._cfg.node_id, self._cfg.worker_id
        )
        self._backend = backend
        self._book = StreamBook(self._cfg.worker_id, self._cfg.stream_flush_ms / 1000.0)
        self._co2 = RegionCarbon(ctx, self._cfg.region)
        """The energy counter's CO2, exported as ``greenserve_gpu_co2_grams``."""
        self._emptied = asyncio.Event()
        """Set whenever the last in-flight request ends (drain waits on it)."""
        self._draining = False
        self._parked = False
        """Beyond the plan's instances for this pool: refuse new work, finish the rest."""
        self._follower = PlanFollower(
            self._cfg.worker_id, self._cfg.pool_id, self._cfg.heartbeat_ttl_s
        )
        self._tokens_out = 0
        self._started_at = time.time()
        self._gate = AdmissionGate(enabled=self._cfg.admission, hold_s=self._cfg.admission_hold_s)
        self._trace_parents: dict[str, otel_context.Context] = {}
        self._latency_by_class: dict[str, tuple[Histogram, Histogram]] = {}
        self._hops: dict[str, str] = {}
        """Hop stamps of requests in flight that asked for them (bench ``--hops``)."""
        self._outbox = ReplyOutbox()
        """Recent client replies, sent again after a NATS outage (:mod:`.outbox`)."""
        self.ended_log = EndedLog(
            ctx.redis,
            ctx.keys.ended(self._cfg.worker_id),
            retention_s=self._cfg.ended_retention_s,
            service=NAME,
        )
        """Ended request ids in Redis, for a router that adopts placements (:mod:`.ended_log`)."""
        self._finished: OrderedDict[str, tuple[str, bytes, bytes]] = OrderedDict()
        """Recently finished requests: reply subject, client's and request.done's copy of
        the completion, so a repeated dispatch is answered without a second run."""
        self._publish_failing = False
        """A publish failed and none succeeded since (one log line per outage)."""
        self._cancels = CancelMemory(self._cfg.cancel_memory_s)
        """Cancels heard lately: a dispatch that arrives after its cancel is not run."""

    @property
    def backend(self) -> WorkerBackend:
        """The engine backend."""
        return self._backend

    @property
    def co2(self) -> RegionCarbon:
        """The CO2 counter of this worker's energy."""
        return self._co2

    @property
    def book(self) -> StreamBook:
        """The requests in flight."""
        return self._book

    async def on_dispatch(self, req: ClassifiedRequest, _msg: Msg) -> DispatchReply:
        """Accept a request if there is room; duplicates are accepted idempotently."""
        rid = req.request.request_id
        now = time.time()
        reply = DispatchReply(
            request_id=rid, worker_id=self._cfg.worker_id, accepted=True, accepted_at=now
        )
        if rid in self._book:
            return reply
        if (finished := self._finished.get(rid)) is not None:
            # Its dispatch reply was lost (a NATS restart) and the router sent it again:
            # it ran here already. Accept, and end it again with the same completion (the
            # client drops the repeat; request.done frees the router's slot).
            subject, to_client, payload = finished
            await self._reply(subject, to_client)
            await self._publish(self._done_subject, payload)
            return reply
        if self._cancels.holds(rid, time.monotonic()):
            # Placed while its cancel was on the way. Accepted and ended at once, not
            # refused: a refusal would send it back to the queue only to be ended there.
            CANCELLED.labels(NAME, "dispatch").inc()
            await reply_error(
                self._ctx.nc,
                self._ctx.subjects,
                service=NAME,
                code=CANCELLED_CODE,
                reason="cancelled by its client before it reached the worker",
                request=req.request,
                done_subject=self._done_subject,
                send=self._reply,
            )
            self.ended_log.add((rid,))
            return reply
        if self._draining or self._parked or len(self._book) >= self._cfg.max_num_seqs:
            return DispatchReply(
                request_id=rid,
                worker_id=self._cfg.worker_id,
                accepted=False,
                accepted_at=now,
                reason="draining" if self._draining else "parked" if self._parked else "full",
            )
        was_closed = self._gate.closed
        if not self._gate.admit(req, self._ctx.clock.now(), limits_of(self._backend)):
            if not was_closed:  # say "no room" before the refusal, so the router waits
                await self._announce_room()
            return DispatchReply(
                request_id=rid,
                worker_id=self._cfg.worker_id,
                accepted=False,
                accepted_at=now,
                reason=REFUSAL_REASON,
            )
        try:
            self._backend.submit(req)
        except BackendRefusalError as exc:
            # E.g. can never fit this GPU's KV cache: a final answer, not a retry elsewhere.
            await reply_error(
                self._ctx.nc,
                self._ctx.subjects,
                service=NAME,
                code=exc.code,
                reason=exc.reason,
                request=req.request,
                done_subject=self._done_subject,
            )
            self.ended_log.add((rid,))
            return reply
        self._book.open(req, now)
        # --- opt-in hop stamps (bench --hops): echoed on the completion ---
        if HOPS_KEY in req.trace:
            self._hops[rid] = req.trace[HOPS_KEY]
        # --- end hop stamps ---
        self._gate.opened(req)
        # The generate span is recorded at completion, as a child of this dispatch span;
        # with tracing off and no trace coming in there is nothing to record.
        if tracing_active(req.trace):
            self._trace_parents[rid] = otel_context.get_current()
        return reply

    # --- dispatch batches (throughput work, docs/performance.md) ---
    async def on_dispatch_batch(self, batch: DispatchBatch, msg: Msg) -> DispatchBatchReply:
        """Answer each request of a batch as :meth:`on_dispatch` would, in order."""
        return DispatchBatchReply(replies=[await self.on_dispatch(r, msg) for r in batch.requests])

    # --- end dispatch batches ---
    async def on_clock(self, cmd: ClockCommand, _msg: Msg) -> ClockReply:
        """Apply a clock from an allowed issuer through the backend."""
        if cmd.issued_by not in self._ctx.settings.dvfs.allowed_issuers:
            return ClockReply(
                worker_id=self._cfg.worker_id,
                applied_mhz=self._backend.snapshot().clock_mhz,
                accepted=False,
                reason=f"issuer {cmd.issued_by!r} may not set clocks",
            )
        outcome = await self._backend.set_clock(cmd.clock_mhz)
        return ClockReply(
            worker_id=self._cfg.worker_id,
            applied_mhz=outcome.applied_mhz,
            accepted=outcome.accepted,
            reason=outcome.reason,
        )

    def on_plan(self, plan: Plan) -> None:
        """Follow a new plan (park or unpark at once)."""
        self._follower.on_plan(plan)
        self._update_parking()

    async def on_peer_stats(self, msg: Msg) -> None:
        """Track the pool's members: their ids rank who parks."""
        with contextlib.suppress(DecodeError):
            self._follower.on_peer(decode(msg.data, WorkerStats), time.time())

    def _update_parking(self) -> None:
        parked = self._ctx.settings.planner.park_workers and self._follower.parked(time.time())
        if parked != self._parked:
            self._parked = parked
            logger.info("%s %s", self._cfg.worker_id, "parks" if parked else "serves again")

    async def on_output(self, batch: OutputBatch) -> None:
        """Publish the chunks and completions one backend batch produces.

        Never raises for a NATS outage: this runs in the engine loop, whose end would end
        the worker (its task group) with every request it holds.
        """
        self._tokens_out += len(batch.emitted)
        if self._gate.observe(batch.emitted, batch.finished):
            await self._announce_room()
        chunks, completions = self._book.on_iteration(
            batch.emitted,
            batch.finished,
            batch.preempted,
            batch.energy_j,
            batch.at,
            batch.finish_reasons,
        )
        for subject, chunk in chunks:
            await self._reply(subject, encode(chunk))
        for subject, done in completions:
            self._record_completion(done)
            payload = encode(done)
            # The client gets its own request id; the bookkeeping the stack-wide scoped one.
            own_id = client_request_id(done.request_id)
            to_client = (
                payload
                if own_id == done.request_id
                else encode(msgspec.structs.replace(done, request_id=own_id))
            )
            # --- opt-in hop stamps: the client reads them from the completion's headers ---
            hops = self._hops.pop(done.request_id, None) if self._hops else None
            headers = {HOPS_HEADER: f"{hops},done={time.time():.6f}"} if hops else None
            # --- end hop stamps ---
            await self._reply(subject, to_client, headers)
            self._finished[done.request_id] = (subject, to_client, payload)
            while len(self._finished) > FINISHED_MEMORY:
                self._finished.popitem(last=False)
        if completions:
            self.ended_log.add(done.request_id for _, done in completions)
        if len(completions) == 1:
            await self._publish(self._done_subject, self._finished[done.request_id][2])
        elif completions:
            # One event for the iteration: the bookkeeping subscribers (request path, dvfs
            # agent, planner) decode one message instead of one per finished request.
            for start in range(0, len(completions), DONE_BATCH_MAX):
                part = completions[start : start + DONE_BATCH_MAX]
                event = CompletionBatch(completions=[done for _, done in part])
                await self._publish(self._done_subject, encode(event))
        if not len(self._book):
            self._emptied.set()

    async def on_failure(self, request_id: str, code: str, reason: str) -> None:
        """End an accepted request with a final error (the backend could not serve it)."""
        stream = self._book.drop(request_id)
        self._trace_parents.pop(request_id, None)
        self._hops.pop(request_id, None)
        self._gate.observe((), (request_id,))
        if stream is not None:
            # Through the outbox like every other reply: an error the outage swallowed is
            # sent again after it, where the client would wait for its own timeout.
            await reply_error(
                self._ctx.nc,
                self._ctx.subjects,
                service=NAME,
                code=code,
                reason=reason,
                request=stream.request.request,
                done_subject=self._done_subject,
                send=self._reply,
            )
            self.ended_log.add((request_id,))
        if not len(self._book):
            self._emptied.set()

    async def on_cancel(self, msg: Msg) -> None:
        """A client cancelled a request (``cancel.client.<client id>``): see :meth:`cancel`."""
        rid = cancelled_id(msg.subject, msg.data)
        if rid is not None:
            await self.cancel(rid)

    async def cancel(self, request_id: str) -> bool:
        """Stop a request this worker runs and end it with ``cancelled``; remember the cancel.

        Returns whether it ran here. The engine stops generating for it (the backend's
        abort frees its batch slot and KV blocks; vLLM's on the closed stream), and the
        ending on ``request.done`` frees the router's slot and the scheduler's records.
        One that already finished stays finished.
        """
        self._cancels.add(request_id, time.monotonic())
        if request_id not in self._book:
            return False
        self._backend.abort(request_id)
        CANCELLED.labels(NAME, "running").inc()
        await self.on_failure(request_id, CANCELLED_CODE, "cancelled by its client")
        return True

    async def _reply(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        """Publish a reply to a client and keep it for a re-send should NATS go away.

        Kept even when the publish failed: the outbox re-sends it once NATS is back.
        """
        await self._publish(subject, payload, headers)
        self._outbox.record(subject, payload, headers, time.time())

    async def _publish(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        """Publish; a NATS error is counted and logged (once per outage), not raised.

        While nats-server restarts the client buffers publishes only up to its pending limit
        (2 MiB), then raises ``OutboundBufferLimitError``: a worker streaming to many
        clients reaches that within seconds of an outage. Chunks and completions are then
        re-sent from the outbox, a lost ``request.done`` is found in the ended log.
        """
        try:
            await self._ctx.nc.publish(subject, payload, headers=headers)
        except nats.errors.Error as exc:
            ERRORS.labels(NAME, "publish").inc()
            if not self._publish_failing:
                self._publish_failing = True
                logger.warning(
                    "publishing failed (%s: %s); re-sent when NATS is back", type(exc).__name__, exc
                )
            return
        self._publish_failing = False

    async def resend_loop(self, period_s: float = 0.05) -> None:
        """Watch the connection; after an outage, send the replies it may have swallowed."""
        nc = self._ctx.nc
        while True:
            await asyncio.sleep(period_s)
            due = self._outbox.observe(nc.is_connected, time.time())
            if due:
                logger.info("re-sending %d client replies after a NATS outage", len(due))
            for entry in due:
                with contextlib.suppress(nats.errors.Error):
                    await nc.publish(entry.subject, entry.payload, headers=entry.headers)

    async def _announce_room(self) -> None:
        """Publish stats now: the router hears at once that the admission gate closed or opened."""
        await self._publish(self._stats_subject, encode(self.stats()))

    async def flush_loop(self) -> None:
        """Send coalesced tokens whose window closed while their request produced no more."""
        period = max(0.005, self._cfg.stream_flush_ms / 2000.0)
        while True:
            await asyncio.sleep(period)
            for subject, chunk in self._book.flush_due(time.time()):
                await self._reply(subject, encode(chunk))

    def _record_completion(self, done: Completion) -> None:
        ttft, e2e = self._latency_children(done.request_class)
        ttft.observe(done.first_token_at - done.sent_at)
        e2e.observe(done.finished_at - done.sent_at)
        parent = self._trace_parents.pop(done.request_id, None)
        if parent is None:  # dispatched untraced with tracing off (see on_dispatch)
            return
        span = self._ctx.tracer.start_span(
            "generate",
            context=parent,
            start_time=int(done.accepted_at * 1e9),
            attributes={
                **request_attributes(done.request_id),
                "gen_ai.usage.input_tokens": done.input_tokens,
                "gen_ai.usage.output_tokens": done.output_tokens,
                "greenserve.energy_j": done.energy_j,
            },
        )
        span.end(end_time=int(done.finished_at * 1e9))

    def _latency_children(self, request_class: str) -> tuple[Histogram, Histogram]:
        """The TTFT and E2E histograms of a class (``labels`` costs a lookup per call)."""
        children = self._latency_by_class.get(request_class)
        if children is None:
            children = (
                REQUEST_LATENCY_S.labels("ttft", request_class),
                REQUEST_LATENCY_S.labels("e2e", request_class),
            )
            self._latency_by_class[request_class] = children
        return children

    def stats(self) -> WorkerStats:
        """Current statistics (also the heartbeat)."""
        snap = self._backend.snapshot()
        cfg = self._cfg
        return WorkerStats(
            worker_id=cfg.worker_id,
            pool_id=cfg.pool_id,
            region=cfg.region,
            node_id=cfg.node_id,
            gpu=snap.gpu,
            model=snap.model,
            tp=snap.tp,
            running=snap.running,
            waiting=snap.waiting,
            max_num_seqs=self._gate.advertised_slots(cfg.max_num_seqs, len(self._book)),
            engine_max_num_seqs=cfg.max_num_seqs,
            started_at=self._started_at,
            free_slots=0 if self._gate.closed else max(0, cfg.max_num_seqs - len(self._book)),
            kv_blocks_used=snap.kv_blocks_used,
            kv_blocks_total=snap.kv_blocks_total,
            kv_block_size=max(1, snap.kv_block_size),
            clock_mhz=snap.clock_mhz,
            power_w=max(0.0, snap.power_w),
            energy_j=max(0.0, snap.energy_j),
            tokens_out=self._tokens_out,
            at=time.time(),
            backend=self._backend.name,
            draining=self._draining or self._parked,
        )

    async def publish_stats(self) -> None:
        """Refresh the backend's view, publish stats and refresh the Redis registration."""
        try:
            await self._backend.refresh()
        except Exception:
            # A failed scrape must not stop the heartbeat: the worker still serves.
            logger.exception("backend refresh failed; publishing the last known stats")
        self._update_parking()
        stats = self.stats()
        GPU_CLOCK_MHZ.labels(stats.worker_id).set(stats.clock_mhz)
        GPU_POWER_W.labels(stats.worker_id).set(stats.power_w)
        GPU_ENERGY_J.labels(stats.worker_id).set(stats.energy_j)
        payload = encode(stats)
        await self._ctx.nc.publish(self._stats_subject, payload)
        ttl_ms = int(self._cfg.heartbeat_ttl_s * 1000)
        await self._ctx.redis.set(self._ctx.keys.worker(self._cfg.worker_id), payload, px=ttl_ms)
        GPU_CO2_G.labels(stats.worker_id, stats.region).set(await self._co2.grams(stats.energy_j))

    async def heartbeat(self) -> None:
        """Stats loop; a Redis or NATS outage delays heartbeats but never ends the worker."""
        await run_periodic(
            self._ctx.stop,
            self._cfg.stats_period_s,
            self.publish_stats,
            service=NAME,
            name="heartbeat",
        )

    async def drain(self, timeout_s: float) -> None:
        """Stop accepting, let running requests finish, hand the rest back."""
        self._draining = True
        try:
            await self.publish_stats()  # routers stop sending here: best effort
        except (RedisError, OSError, nats.errors.Error) as exc:
            # Handing the unfinished requests back matters more than the registration.
            ERRORS.labels(NAME, "drain").inc()
            logger.warning("draining without announcing it: %s", exc)
        if len(self._book):
            self._emptied.clear()
            await wait_event(self._emptied, timeout_s)
        leftovers = self._book.requests()
        for req in leftovers:
            self._backend.abort(req.request.request_id)
            self._book.drop(req.request.request_id)
            self._trace_parents.pop(req.request.request_id, None)
        if leftovers:
            logger.warning("handing %d unfinished requests back to the scheduler", len(leftovers))
            try:
                await request(
                    self._ctx.nc,
                    self._ctx.subjects.scheduler_requeue,
                    RequeueRequest(requests=leftovers),
                    SubmitReply,
                    self._ctx.settings.nats.request_timeout_s,
                )
            except (nats.errors.Error, DecodeError) as exc:
                # The router re-queues them as orphans once this worker's heartbeat is gone.
                ERRORS.labels(NAME, "requeue").inc(len(leftovers))
                logger.warning("could not hand %d requests back: %s", len(leftovers), exc)
        try:
            await self._ctx.redis.delete(self._ctx.keys.worker(self._cfg.worker_id))
        except (RedisError, OSError) as exc:  # the registration expires with its TTL
            logger.warning("could not deregister: %s", exc)


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set, then drain."""
    backend = build_backend(ctx.settings)
    shim = WorkerShim(ctx, backend)
    await backend.start(shim)
    try:
        await _serve_with(ctx, shim)
    finally:
        await backend.close()


async def _serve_with(ctx: ServiceContext, shim: WorkerShim) -> None:
    wid = ctx.settings.worker.worker_id
    subs = [
        await serve_subject(
            ctx.nc,
            ctx.subjects.worker_dispatch(wid),
            ClassifiedRequest,
            shim.on_dispatch,
            service=NAME,
        ),
        # Clock commands: the node-bound v2 subject, and v1 for one more version.
        await serve_subject(
            ctx.nc,
            ctx.subjects.worker_clock_v2(ctx.settings.worker.node_id, wid),
            ClockCommand,
            shim.on_clock,
            service=NAME,
        ),
        await serve_subject(
            ctx.nc,
            ctx.subjects.worker_dispatch_batch(wid),
            DispatchBatch,
            shim.on_dispatch_batch,
            service=NAME,
        ),
        await serve_subject(
            ctx.nc, ctx.subjects.worker_clock(wid), ClockCommand, shim.on_clock, service=NAME
        ),
        # Every client's cancels: the router does not say which worker holds a request.
        await ctx.nc.subscribe(ctx.subjects.cancel_wildcard, cb=shim.on_cancel),
        # Its pool's peers only: they are whom it ranks against to park.
        await ctx.nc.subscribe(
            ctx.subjects.worker_stats_pool_wildcard(ctx.settings.worker.pool_id),
            cb=shim.on_peer_stats,
        ),
        await watch_plan(ctx, shim.on_plan),
    ]
    ended_stop = asyncio.Event()  # after the drain: what ends while draining is recorded too
    async with asyncio.TaskGroup() as tg:
        tg.create_task(shim.ended_log.run(ended_stop))
        engine_task = tg.create_task(shim.backend.run())
        flush_task = tg.create_task(shim.flush_loop())
        resend_task = tg.create_task(shim.resend_loop())
        tg.create_task(shim.heartbeat())
        if ctx.settings.dvfs.mode == PREDICTIVE_MODE:  # per-request state for the dvfs agent
            tg.create_task(publish_states(ctx, shim.book.streams, shim.backend.snapshot))
        await ctx.stop.wait()
        await shim.drain(ctx.settings.shutdown_timeout_s)
        ended_stop.set()
        engine_task.cancel()
        flush_task.cancel()
        resend_task.cancel()
    for sub in subs:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
