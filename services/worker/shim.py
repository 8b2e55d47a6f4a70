"""The worker shim: one engine backend behind the dispatch subject, and its output sink.

:class:`WorkerShim` decides what happens to each dispatch (run it, accept a repeat without
a rerun, end a cancelled one at once, refuse when full, draining, parked or the admission
gate is closed), turns each backend :class:`~.backend.OutputBatch` into chunks and
completions, answers clock commands, follows the plan's parking and drains on stop. What
it hands off is elsewhere: publishing and the outage re-send in :mod:`.publisher`,
completions and their memory in :mod:`.completions`, the heartbeat in
:mod:`.registration`, the drain's hand-back in :mod:`.drain`, the subscriptions and tasks
in :mod:`.service`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final

import nats.errors
from nats.aio.msg import Msg
from opentelemetry import trace
from prometheus_client import Counter
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode, encode
from proto.leases import lease_expiry
from proto.messages import (
    ClassifiedRequest,
    ClockCommand,
    ClockReply,
    DispatchBatch,
    DispatchBatchReply,
    DispatchReply,
    Plan,
    WorkerStats,
)
from services.worker.admission_gate import REFUSAL_REASON, AdmissionGate, limits_of
from services.worker.backend import BackendRefusalError, OutputBatch, WorkerBackend
from services.worker.clock_range import CLOCK_OUT_OF_RANGE, out_of_range
from services.worker.co2 import RegionCarbon
from services.worker.completions import CompletionSender
from services.worker.contact import ContactWatch, drop_connection, nats_round_trip
from services.worker.drain import hand_back
from services.worker.ended_log import EndedLog
from services.worker.gpu_meters import GpuMeters
from services.worker.leases import LeaseGuard
from services.worker.publisher import Contact, ReplyPublisher
from services.worker.registration import deregister, register, worker_stats
from services.worker.streams import StreamBook
from shared.cancels import CANCELLED_CODE, CancelMemory, cancelled_id
from shared.counters import CANCELLED, ERRORS
from shared.domain.plan import PlanFollower
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic, wait_event
from shared.replies import reply_error
from shared.resends import resend_ids

__all__ = ["NAME", "WorkerShim"]

NAME = "worker"
RESENT_ON_ASK: Final = Counter(
    "greenserve_worker_resent_on_ask_total",
    "Endings a worker sent again because their reconnected client asked for them",
)

logger = logging.getLogger(__name__)


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
        self._book = StreamBook(
            self._cfg.worker_id,
            self._cfg.stream_flush_ms / 1000.0,
            gpu=self._cfg.gpu,
            tp=self._cfg.tp,
        )
        self._co2 = RegionCarbon(ctx, self._cfg.region)
        """The energy counter's CO2, exported as ``greenserve_gpu_co2_grams_total``."""
        self._meters = GpuMeters(self._cfg.worker_id, self._cfg.region, model_s=ctx.clock.now())
        """The GPU series on ``/metrics``; the engine's energy counts from about now."""
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
        self._publisher = ReplyPublisher(ctx, NAME)
        """Every publish, and client replies sent again after a NATS outage."""
        self.ended_log = EndedLog(
            ctx.redis,
            ctx.keys.ended(self._cfg.worker_id),
            retention_s=self._cfg.ended_retention_s,
            service=NAME,
        )
        """Ended request ids in Redis, for a router that adopts placements (:mod:`.ended_log`)."""
        self._completions = CompletionSender(
            ctx, self._publisher, self.ended_log, self._done_subject
        )
        """Completions, their latency and spans, and the recently finished requests."""
        self._cancels = CancelMemory(self._cfg.cancel_memory_s)
        """Cancels heard lately: a dispatch that arrives after its cancel is not run."""
        self.leases = LeaseGuard(
            ctx.redis,
            ctx.keys.revoked(self._cfg.worker_id),
            stale_after_s=self._cfg.lease_stale_after_s,
            settle_s=self._cfg.lease_settle_s,
            held=lambda: {
                s.request.request.request_id: s.accepted_at for s in self._book.streams()
            },
            abort=self._abort_revoked,
            service=NAME,
        )
        """After a freeze, requests the router took back are aborted unanswered (:mod:`.leases`)."""
        self.contact = ContactWatch(
            ctx.redis,
            lambda: ctx.nc.is_connected,
            # Half the registration's TTL: lost contact is noticed before the router, which
            # times silence in router.worker_timeout_s (3 s by default), calls the worker
            # gone and revokes what it runs.
            lost_after_s=self._cfg.heartbeat_ttl_s / 2.0,
            beat_period_s=self._cfg.stats_period_s,
            nats_reconnects=lambda: int(ctx.nc.stats["reconnects"]),
            nats_ping=lambda timeout_s: nats_round_trip(ctx.nc, timeout_s),
            nats_drop=lambda: drop_connection(ctx.nc),
        )
        """NATS connected and the store answering (:mod:`.contact`)."""
        self._recorded: set[str] = set()
        """Ended ids written when contact came back: sent at the re-send even if revoked
        since (the stack may have taken them for answered)."""

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

    async def on_dispatch(self, req: ClassifiedRequest, msg: Msg) -> DispatchReply:
        """Accept a request if there is room; duplicates are accepted idempotently."""
        await self.leases.hold()  # after a freeze: what was taken back is known first
        rid = req.request.request_id
        now = time.time()
        reply = DispatchReply(
            request_id=rid, worker_id=self._cfg.worker_id, accepted=True, accepted_at=now
        )
        if rid in self._book:
            return reply
        if self._completions.finished(rid):
            # It ran here already (its dispatch reply was lost, or the router took it back
            # in a partition and placed it here again): accepted, ended again. Accepted anew
            # for the revocation filter of a later outage's re-send.
            self._publisher.outbox.owner(req.request.reply_subject, rid, now)
            await self._completions.send_again(rid)
            return reply
        refusal = self._lease_refusal(rid, msg)
        if refusal:
            return DispatchReply(
                request_id=rid,
                worker_id=self._cfg.worker_id,
                accepted=False,
                accepted_at=now,
                reason=refusal,
            )
        # Whose replies go to this subject, accepted when: the re-send after an outage
        # skips those of requests the router revoked meanwhile (:mod:`.outbox`).
        self._publisher.outbox.owner(req.request.reply_subject, rid, now)
        if self._cancels.holds(rid, time.monotonic()):
            # Placed while its cancel was on the way. Accepted and ended at once, not
            # refused: a refusal would send it back to the queue only to be ended there.
            # A dispatch repeated because its reply was lost (or one of a request this
            # worker aborted) gets the ending again, deliberately, but counts once.
            if self._cancels.first_end(rid):
                CANCELLED.labels(NAME, "dispatch").inc()
            await self._send_ending(
                req, CANCELLED_CODE, "cancelled by its client before it reached the worker"
            )
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
            await self._send_ending(req, exc.code, exc.reason)
            return reply
        self._book.open(req, now)
        self._completions.opened(req)
        self._gate.opened(req)
        return reply

    def _lease_refusal(self, request_id: str, msg: Msg) -> str:
        """Why a dispatch's lease forbids running it ("" when it allows it)."""
        try:
            # A dispatch handed over in process (tests, tools) comes without a message.
            expires_at = lease_expiry(getattr(msg, "headers", None))
        except DecodeError as exc:
            ERRORS.labels(NAME, "malformed").inc()
            return f"malformed lease: {exc}"
        lease_s = self._ctx.settings.router.lease_s
        return self.leases.dispatch_refusal(request_id, expires_at, lease_s)

    async def _abort_revoked(self, request_ids: list[str]) -> None:
        """Stop requests the router revoked while this worker was frozen, unanswered.

        Not recorded as ended here: another worker runs them, and the router must not
        take them for ended when it looks this worker's record up.
        """
        for rid in request_ids:
            if rid not in self._book:
                continue
            self._backend.abort(rid)
            self._book.drop(rid)
            self._completions.forget(rid)
            self._gate.observe((), (rid,))
        if not len(self._book):
            self._emptied.set()

    # --- dispatch batches (throughput work, docs/performance.md) ---
    async def on_dispatch_batch(self, batch: DispatchBatch, msg: Msg) -> DispatchBatchReply:
        """Answer each request of a batch as :meth:`on_dispatch` would, in order."""
        return DispatchBatchReply(replies=[await self.on_dispatch(r, msg) for r in batch.requests])

    # --- end dispatch batches ---
    async def on_clock(self, cmd: ClockCommand, _msg: Msg) -> ClockReply:
        """Apply a clock from an allowed issuer through the backend; refuse one outside the
        GPU's supported range (:mod:`.clock_range`)."""
        if cmd.issued_by not in self._ctx.settings.dvfs.allowed_issuers:
            return ClockReply(
                worker_id=self._cfg.worker_id,
                applied_mhz=self._backend.snapshot().clock_mhz,
                accepted=False,
                reason=f"issuer {cmd.issued_by!r} may not set clocks",
            )
        refused = out_of_range(self._cfg.gpu, cmd.clock_mhz)
        if refused is not None:
            ERRORS.labels("worker", CLOCK_OUT_OF_RANGE).inc()
            logger.warning("clock command from %s refused: %s", cmd.issued_by, refused)
            return ClockReply(
                worker_id=self._cfg.worker_id,
                applied_mhz=self._backend.snapshot().clock_mhz,
                accepted=False,
                reason=refused,
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
        await self.leases.hold()  # after a freeze: revoked requests leave the book first
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
            await self._publisher.reply(subject, encode(chunk))
        await self._completions.send(completions)
        if not len(self._book):
            self._emptied.set()

    async def on_failure(self, request_id: str, code: str, reason: str) -> None:
        """End an accepted request with a final error (the backend could not serve it)."""
        await self.leases.hold()
        stream = self._book.drop(request_id)
        self._completions.failed(request_id, code, reason)
        # A gate this reopens is not announced as on_output does: the closed stats say
        # max_num_seqs = the in-flight count when it closed, so the router's own count frees
        # this request's slot at its request.done; more room shows in the next heartbeat.
        self._gate.observe((), (request_id,))
        if stream is not None:
            await self._send_ending(stream.request, code, reason)
        if not len(self._book):
            self._emptied.set()

    async def _send_ending(self, req: ClassifiedRequest, code: str, reason: str) -> None:
        """End a request with a final error and record it as ended here.

        Through the outbox like every other reply: an error the outage swallowed is sent
        again after it, where the client would wait for its own timeout.
        """
        # Inside a dispatch's span (a request cancelled before it got here) that span failed.
        trace.get_current_span().set_status(trace.StatusCode.ERROR, f"{code}: {reason}")
        await reply_error(
            self._ctx.nc,
            self._ctx.subjects,
            service=NAME,
            code=code,
            reason=reason,
            request=req.request,
            done_subject=self._done_subject,
            send=self._publisher.reply,
        )
        self.ended_log.add((req.request.request_id,))

    async def on_cancel(self, msg: Msg) -> None:
        """A client cancelled a request (``cancel.client.<client id>``): see :meth:`cancel`."""
        rid = cancelled_id(msg.subject, msg.data)
        if rid is None:
            # Fire and forget: nobody to answer, so the counter is the only trace it leaves.
            ERRORS.labels(NAME, "malformed").inc()
            return
        await self.cancel(rid)

    async def on_resend(self, msg: Msg) -> None:
        """A reconnected client asks for endings it may have missed
        (``resend.client.<client id>``, :mod:`shared.resends`): those this worker
        remembers go to their reply subjects again."""
        request_ids = resend_ids(msg.subject, msg.data)
        if request_ids is None:
            ERRORS.labels(NAME, "malformed").inc()
            return
        sent = 0
        for rid in request_ids:
            sent += await self._completions.send_to_client_again(rid)
        if sent:
            RESENT_ON_ASK.inc(sent)
            logger.info("sent %d endings again on their client's ask", sent)

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
        self._cancels.first_end(request_id)  # a repeated dispatch of it is not counted again
        CANCELLED.labels(NAME, "running").inc()
        await self.on_failure(request_id, CANCELLED_CODE, "cancelled by its client")
        return True

    async def resend_loop(self, period_s: float = 0.05) -> None:
        """Watch the contact with the stack; once it is back after an outage or a
        partition, send the replies it may have swallowed, except those of requests the
        router revoked meanwhile (:mod:`.publisher`, :mod:`.outbox`)."""
        contact = Contact(
            in_contact=self.contact.in_contact,
            confirmed_at=lambda: self.contact.confirmed_at,
            lost=self._contact_lost,
            regained=self._contact_regained,
            revocations=self._revocations,
        )
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._publisher.resend_loop(contact, period_s))
            tg.create_task(self.contact.probe())

    def _contact_lost(self) -> None:
        """Contact is lost: ended records wait until the revocations are read."""
        logger.warning(
            "out of contact with the stack (NATS or the store unreachable): keeping replies "
            "and ended records until it is back and the revocations are read"
        )
        self.ended_log.hold()

    async def _contact_regained(self) -> None:
        """Contact is back: what the router took back meanwhile must not go on streaming or
        finish here, nor be recorded as ended here; the rest is recorded at once."""
        logger.info("back in contact with the stack: checking revocations")
        self.leases.force()  # every sending path waits for one check (after the settle)
        revoked = await self.leases.read_now()  # ... and this one aborts at once
        if revoked is None:
            return  # the ended records stay held until the re-send reads them
        taken = self._publisher.outbox.revoked_ids(revoked)
        self._recorded = self.ended_log.release(taken)
        self._completions.forget_finished(taken)  # nor sent again on a client's ask

    async def _revocations(self) -> dict[str, float] | None:
        """The revocations that filter the re-send (None when unreadable): read again, for
        the router may have revoked more since contact came back, but without those this
        worker recorded as ended then, whose answers the stack may take for sent."""
        revoked = await self.leases.read_now()
        if revoked is None:
            return None
        recorded, self._recorded = self._recorded, set()
        taken = self._publisher.outbox.revoked_ids(revoked) - recorded
        if self.ended_log.held:  # the read when contact came back failed
            self.ended_log.release(taken)
        self._completions.forget_finished(taken)
        return {rid: at for rid, at in revoked.items() if rid not in recorded}

    async def _announce_room(self) -> None:
        """Publish stats now: the router hears at once that the admission gate closed or opened."""
        await self._publisher.publish(self._stats_subject, encode(self.stats()))

    async def flush_loop(self) -> None:
        """Send coalesced tokens whose window closed while their request produced no more."""
        period = max(0.005, self._cfg.stream_flush_ms / 2000.0)
        while True:
            await asyncio.sleep(period)
            await self.leases.hold()
            for subject, chunk in self._book.flush_due(time.time()):
                await self._publisher.reply(subject, encode(chunk))

    def stats(self) -> WorkerStats:
        """Current statistics (also the heartbeat)."""
        return worker_stats(
            self._cfg,
            self._backend.snapshot(),
            self._gate,
            in_flight=len(self._book),
            started_at=self._started_at,
            tokens_out=self._tokens_out,
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
        started = time.time()
        await register(self._ctx, self._stats_subject, self.stats(), self._co2, self._meters)
        self.contact.store_seen(started)
        self.book.intensity_g_per_kwh = self._co2.last_intensity

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
            self._completions.forget(req.request.request_id)
        await hand_back(self._ctx, leftovers, NAME)
        await deregister(self._ctx, self._cfg.worker_id)
