"""Scheduler shell: per-pool queues, stored in Redis, drained by routers that have room.

Durability: a submitted request is written to Redis (``queued``) before the classifier is
told "accepted"; a pulled request moves to ``dispatched`` (as an Assignment without a
worker) until the router records its worker or it ends. A restarted scheduler reloads its
queues from Redis; a pulled request that no router placed in time goes back to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry import trace
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode, encode, request_endings
from proto.messages import (
    UNPLACED_WORKER,
    Assignment,
    ClassifiedRequest,
    PullReply,
    PullRequest,
    RequeueRequest,
    SubmitBatch,
    SubmitBatchReply,
    SubmitReply,
)
from proto.subjects import QUEUE_GROUPS
from services.scheduler.cancels import CancelBook
from services.scheduler.ladder_shell import start_ladder
from services.scheduler.pool_queues import SchedulerState
from shared.bus import serve as serve_subject
from shared.bus import tracing_active
from shared.cancels import cancelled_id
from shared.counters import MISSED_ENDINGS, QUEUE_DEPTH
from shared.ended_lookup import ended_among, placement_records
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic
from shared.store import as_bytes
from shared.telemetry import extract_context, request_attributes

__all__ = ["NAME", "UNPLACED_WORKER", "SchedulerShell", "serve"]

NAME = "scheduler"
SEEN_TTL_S = 6 * 3600
FORGET_AGAIN_S = 1.0
"""Delay of the second delete of an ended request's record (:meth:`SchedulerShell.forget_ended`)."""
ENDED_MEMORY_S = 60.0
"""How long the scheduler remembers an ended request (to drop a late requeue of it)."""
ENDED_MEMORY_MAX = 200_000
"""At most this many remembered ends (≈ 60 s at 3,000 req/s)."""
REUSED = 2
"""Store-new result of a request whose id its client already used for another message."""
CANCELLED_FIRST = 3
"""Store-new result of a new request whose client had cancelled it: seen, not stored."""
STORE_NEW_LUA = """
local out = {}
local n = (#KEYS - 1) / 2
for i = 2, n + 1 do
  local id, payload, mark = ARGV[3 * i - 4], ARGV[3 * i - 3], ARGV[3 * i - 2]
  if redis.call('SET', KEYS[i], mark, 'NX', 'EX', ARGV[1]) then
    if redis.call('EXISTS', KEYS[n + i]) == 1 then
      out[i - 1] = 3
    else
      redis.call('HSET', KEYS[1], id, payload)
      out[i - 1] = 1
    end
  else
    out[i - 1] = 0
    local prev = redis.call('GET', KEYS[i])
    local seq, digest = string.match(mark, '^s(%d+):(.*)$')
    local pseq, pdigest = string.match(prev or '', '^s(%d+):(.*)$')
    if seq and pseq and seq ~= pseq and digest ~= pdigest then
      out[i - 1] = 2
    end
  end
end
return out
"""
"""Mark each request id of a batch seen and store the request, in one atomic step.

``KEYS`` = the ``queued`` hash, then one ``seen`` key per request, then one ``cancelled``
key per request; ``ARGV`` = the seen TTL, then id, payload and seen-mark per request. The
mark is ``s<ingress stream sequence>:<digest of the client's request>`` (``1`` when the
sequence is unknown). Returns per request 1 (stored now), 3 (new, but its client
cancelled it first: marked seen, not stored), 0 (already seen: a redelivery of the same
message, the same request published again, e.g. a retried publish the stream stored
twice, or nothing to tell them apart by) or 2 (already seen with another message *and*
another request: the client reused its id; not stored). A scheduler killed between mark
and store would otherwise leave a 'seen' mark without the request, and the redelivered
copy would be dropped as a duplicate. One script call per batch instead of one per
request: each call costs redis-py a command to pack and parse."""


def seen_mark(req: ClassifiedRequest) -> str:
    """The seen-mark of a request: its ingress sequence and a digest of the client's request.

    The digest covers the request as the client sent it (with its send time), so the same
    request published twice is told from a new one reusing the id.
    """
    if not req.ingress_seq:
        return "1"
    digest = hashlib.blake2b(encode(req.request), digest_size=12).hexdigest()
    return f"s{req.ingress_seq}:{digest}"


logger = logging.getLogger(__name__)


class SchedulerShell:
    """The scheduler's hand-offs, callable in memory or served on NATS.

    The separate-process deployment serves them on ``scheduler.submit``/``pull``/``requeue``
    (:func:`serve`); the co-located request path (:mod:`services.requestpath`) calls
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
        self._ended_ids: set[str] = set()
        self._forget_again: deque[tuple[float, list[str]]] = deque()
        """Ids deleted from Redis, with when: deleted once more after ``FORGET_AGAIN_S``."""
        self._recently_ended: OrderedDict[str, float] = OrderedDict()
        """Ended ids of the last :data:`ENDED_MEMORY_S` (wall): a late requeue is dropped."""
        self._audited_at = time.monotonic()
        """When :meth:`sweep_records` last audited (the first audit waits one period)."""
        self._cancels = CancelBook(ctx, NAME)

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
        sequence): the client sent a new request under an id it had used.

        Raises:
            RedisError: nothing was confirmed; the caller must not ack (redelivery follows).
        """
        keys = self._ctx.keys
        seen_keys: list[str] = []
        cancel_keys: list[str] = []
        args: list[str | bytes | int] = [SEEN_TTL_S]
        for req in requests:
            rid = req.request.request_id
            seen_keys.append(keys.seen(rid))
            cancel_keys.append(keys.cancelled(rid))
            args += [rid, encode(req), seen_mark(req)]
        # EVAL, not a registered Script: a Script costs a SCRIPT EXISTS round trip first;
        # the body is short and Redis caches it by its digest.
        fresh_flags = await self._ctx.redis.eval(
            STORE_NEW_LUA,
            1 + 2 * len(seen_keys),
            keys.queued,
            *seen_keys,
            *cancel_keys,
            *args,
        )
        accepted: list[str] = []
        duplicates: list[str] = []
        reused: list[int] = []
        cancelled: list[ClassifiedRequest] = []
        pools: set[str] = set()
        for req, fresh in zip(requests, fresh_flags, strict=True):
            rid = req.request.request_id
            if fresh == REUSED:
                reused.append(req.ingress_seq)
                continue
            if not fresh:
                duplicates.append(rid)
                continue
            # The Redis mark covers cancels from before the script ran; the memory one that
            # this process heard while it ran (the cancel handler writes it before awaiting).
            if fresh == CANCELLED_FIRST or self._cancels.holds(rid):
                cancelled.append(req)
                continue
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
        return SubmitBatchReply(
            accepted=accepted,
            duplicates=duplicates,
            reused=reused,
            cancelled=[req.request.request_id for req in cancelled],
        )

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
        """
        late = [r for r in requests if r.request.request_id in self._recently_ended]
        if late:
            logger.info("dropping %d requeued requests that already ended", len(late))
            requests = [r for r in requests if r.request.request_id not in self._recently_ended]
        # Refused or unplaced after its client cancelled it: end it instead of queueing it.
        requests, cancelled = self._cancels.split(requests)
        await self._end_cancelled(cancelled, "requeue")
        await _requeue(self._ctx, self.state, requests, self._on_ready)

    def ended(self, request_id: str) -> None:
        """A request ended (completion or error): forget it (Redis in the next flush)."""
        now = time.monotonic()
        self._recently_ended[request_id] = now
        self._recently_ended.move_to_end(request_id)
        while self._recently_ended:
            oldest, at = next(iter(self._recently_ended.items()))
            if now - at <= ENDED_MEMORY_S and len(self._recently_ended) <= ENDED_MEMORY_MAX:
                break
            del self._recently_ended[oldest]
        self._ended_ids.add(request_id)
        # An error can end a request that is still queued (e.g. shed by the ladder).
        self.state.remove(request_id)

    async def forget_ended(self) -> None:
        """Delete ended requests from Redis, batched: one round trip per period.

        Each id is deleted from ``dispatched`` once more ``FORGET_AGAIN_S`` later: a router
        writes a placement's record after the worker accepted it, and a request that ended
        while that write was on its way could have its record written after this delete,
        left for a restarted router to adopt.
        """
        now = time.monotonic()
        again: list[str] = []
        while self._forget_again and now - self._forget_again[0][0] >= FORGET_AGAIN_S:
            again += self._forget_again.popleft()[1]
        if not self._ended_ids and not again:
            return
        done = list(self._ended_ids)
        pipe = self._ctx.redis.pipeline(transaction=False)
        pipe.hdel(self._ctx.keys.dispatched, *done, *again)
        if done:
            # Also from ``queued``: a request the co-located router placed but had not
            # recorded yet when it ended is still there, and would run again after a restart.
            pipe.hdel(self._ctx.keys.queued, *done)
        await pipe.execute()
        self._ended_ids.difference_update(done)
        if done:
            self._forget_again.append((now, done))

    async def sweep_records(self) -> None:
        """One read of the placement records for the reaper and, once per audit period,
        the audit (:meth:`audit_endings`): the ``dispatched`` hash holds every request in
        flight, and reading and decoding it twice cost twice."""
        ctx = self._ctx
        records = await placement_records(ctx.redis, ctx.keys)
        stale = _unplaced_stale(records, ctx.settings.scheduler.unplaced_timeout_s)
        if stale:
            logger.warning("re-queueing %d requests pulled but never placed", len(stale))
            await self.requeue(stale)  # the way every requeue goes: ended or cancelled ones end
        now = time.monotonic()
        if now - self._audited_at >= ctx.settings.scheduler.ended_audit_period_s:
            self._audited_at = now
            await self.audit_endings(records)

    async def audit_endings(self, records: list[Assignment] | None = None) -> None:
        """Forget the placement records of requests their workers ended unheard.

        A scheduler that was down or disconnected when a request ended never heard its
        ``request.done``, and the request's ``dispatched`` record would stay for good (a
        restarted router would adopt it and dispatch it again). Records older than one
        audit period are looked up in the workers' ended records
        (:mod:`shared.ended_lookup`); those found are forgotten as on ``request.done``.

        Args:
            records: the placement records, when the caller has just read them.
        """
        ctx = self._ctx
        if records is None:
            records = await placement_records(ctx.redis, ctx.keys)
        cutoff = time.time() - ctx.settings.scheduler.ended_audit_period_s
        placed = [
            (held.request.request.request_id, held.worker_id)
            for held in records
            if held.worker_id != UNPLACED_WORKER and held.dispatched_at < cutoff
        ]
        if not placed:
            return
        ended = await ended_among(ctx.redis, ctx.keys, placed)
        if not ended:
            return
        logger.warning("forgetting %d placed requests that had ended unheard", len(ended))
        MISSED_ENDINGS.labels(NAME).inc(len(ended))
        for rid in ended:
            self.ended(rid)

    async def remind(self) -> None:
        """Repeat the ready signal of every pool with a backlog (covers lost signals)."""
        for pool_id in self.state.backlog():
            await self._on_ready(pool_id)

    async def serve_subjects(self, *, requeue_only: bool = False) -> list[Subscription]:
        """Serve submit, pull and requeue on NATS (queue group ``scheduler``).

        Cancels (``cancel.client.*``) are heard in both modes. ``requeue_only`` serves just
        ``scheduler.requeue`` (workers hand drained requests back there): the co-located
        request path submits and pulls by method call, and its identity may not subscribe
        to the other two (``shared.security.nats_acl``).
        """
        ctx, subjects = self._ctx, self._ctx.subjects

        async def on_submit(batch: SubmitBatch, _msg: Msg) -> SubmitBatchReply:
            return await self.submit(batch.requests)

        async def on_pull(pull: PullRequest, _msg: Msg) -> PullReply:
            taken, depth = await self.pull(pull.pool_id, pull.slots)
            return PullReply(requests=taken, queued=depth)

        async def on_requeue(body: RequeueRequest, _msg: Msg) -> SubmitReply:
            await self.requeue(body.requests)
            rid = body.requests[0].request.request_id if body.requests else "none"
            return SubmitReply(request_id=rid, accepted=True)

        async def on_cancel(msg: Msg) -> None:
            rid = cancelled_id(msg.subject, msg.data)
            if rid is not None:
                await self.cancel(rid)

        queue = QUEUE_GROUPS["scheduler"]
        subs = [
            # Not in the queue group: a cancel is an event every scheduler replica must hear.
            await ctx.nc.subscribe(subjects.cancel_wildcard, cb=on_cancel),
            await serve_subject(
                ctx.nc,
                subjects.scheduler_requeue,
                RequeueRequest,
                on_requeue,
                service=NAME,
                queue=queue,
            ),
        ]
        if not requeue_only:
            subs += [
                await serve_subject(
                    ctx.nc,
                    subjects.scheduler_submit,
                    SubmitBatch,
                    on_submit,
                    service=NAME,
                    queue=queue,
                ),
                await serve_subject(
                    ctx.nc, subjects.scheduler_pull, PullRequest, on_pull, service=NAME, queue=queue
                ),
            ]
        return subs

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


async def _requeue(
    ctx: ServiceContext,
    state: SchedulerState,
    requests: list[ClassifiedRequest],
    on_ready: Callable[[str], Awaitable[None]],
) -> None:
    # The in-memory queue is primary; Redis is the recovery log. Queue first, so a Redis
    # outage at this moment cannot drop a request that is being handed back.
    for req in requests:
        state.push(req)
    for pool_id in {req.pool_id for req in requests}:
        await on_ready(pool_id)
    if not requests:
        return
    queued = {req.request.request_id: encode(req) for req in requests}
    pipe = ctx.redis.pipeline(transaction=True)
    pipe.hset(ctx.keys.queued, mapping=queued)  # type: ignore[arg-type]
    pipe.hdel(ctx.keys.dispatched, *queued)
    try:
        await pipe.execute()
    except RedisError as exc:
        logger.warning("could not record %d re-queued requests in redis: %s", len(requests), exc)


def _unplaced_stale(records: list[Assignment], timeout_s: float) -> list[ClassifiedRequest]:
    """Requests a router pulled but never placed within ``timeout_s`` (the router died)."""
    now = time.time()
    return [
        held.request
        for held in records
        if held.worker_id == UNPLACED_WORKER and now - held.dispatched_at > timeout_s
    ]
