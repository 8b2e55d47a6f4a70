"""Router recovery: placements whose fate the router may have missed.

The placement loop (:mod:`services.router.service`) assumes every dispatch is answered and
every ending heard. This module handles the cases where that failed, always by looking the
request up in its worker's record of ended requests (:mod:`shared.ended_lookup`) before
running it anywhere again, because a request that ran while the router was not listening
must not run a second time:

* **adoption**: a restarted router takes over the placements its predecessor recorded;
* **unanswered dispatches**: sent again to the same live worker, which answers a repeat
  without a second run, before they go back to the queue;
* **orphans** of workers that went silent, re-queued unless they ended, and revoked from
  the silent worker first (:mod:`services.router.revocations`): one that was only frozen
  aborts them when it wakes;
* **the audit**: placements older than one period whose ``request.done`` went unheard.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

from prometheus_client import Counter
from redis.exceptions import RedisError

from proto.messages import UNPLACED_WORKER, ClassifiedRequest
from services.router.registry import InFlight, WorkerRegistry
from services.router.revocations import revoke
from services.router.scheduler_link import SchedulerLink
from shared.counters import MISSED_ENDINGS
from shared.ended_lookup import ended_among, placement_records
from shared.lifecycle import ServiceContext

__all__ = ["ADOPTED", "DISPATCH_RETRIES", "Recovery", "Resend", "Unsure"]

ADOPTED: Final = Counter(
    "greenserve_router_adopted_total",
    "Placements a starting router took over from Redis and dispatched again to confirm",
)
"""Registered here, not in ``shared.counters``: every process imports that module, and a
metric without labels is exported (as 0) by every process that registers it, so each
service's ``/metrics`` had a router counter."""

DISPATCH_RETRIES: Final = 3
"""Times an unanswered dispatch goes to the same worker again before the request is
re-queued: a repeat is answered without a second run, another worker would run it twice."""

Resend = Callable[[dict[str, list[ClassifiedRequest]]], None]
"""Hands requests, by worker id, to those workers' dispatch loops."""

Unsure = tuple[ClassifiedRequest, str, bool]
"""A placement whose dispatch settled nothing: request, worker id, and whether it went
unanswered (False: an adopted placement its worker refused)."""

logger = logging.getLogger(__name__)


class Recovery:
    """The router's recovery paths, over the shell's registry and scheduler link."""

    def __init__(
        self,
        ctx: ServiceContext,
        registry: WorkerRegistry,
        scheduler: SchedulerLink,
        *,
        resend: Resend,
        free: Callable[[str], None],
        service: str,
    ) -> None:
        """``resend`` dispatches again, ``free`` releases an ended request's slot."""
        self._ctx = ctx
        self._registry = registry
        self._scheduler = scheduler
        self._resend = resend
        self._free = free
        self._service = service
        self._adopted: set[str] = set()
        """Adopted placements not settled yet (:meth:`adopt`)."""
        self._redispatches: dict[str, int] = {}
        """Unanswered dispatches sent to their worker again, by request id."""

    def settled(self, request_id: str) -> None:
        """The worker answered this placement (accepted it or already held it)."""
        self._redispatches.pop(request_id, None)

    def take_adopted(self, request_id: str) -> bool:
        """Whether this placement was adopted and not settled yet; it is settled now."""
        if request_id in self._adopted:
            self._adopted.discard(request_id)
            return True
        return False

    async def adopt(self) -> int:
        """Take over the placements recorded in Redis (by this router's previous run).

        A restarted router knew nothing of what its predecessor had placed: a worker lost
        while it was down, or after, orphaned those requests with nobody to re-queue them.
        Each recorded placement is dispatched to its worker again. A worker answers one it
        holds without a second run, and one it finished by sending the same completion
        again (the client drops the repeat). One it refuses (it restarted) or does not
        answer (it is gone) goes back to the queue unless the worker's record of ended
        requests in Redis names it (:mod:`services.worker.ended_log`): a request that
        ended while the bookkeeping was down must not run twice. Pulled but unplaced
        records stay the scheduler reaper's. One router per cell: a second would re-queue
        the first one's orphans too.

        Returns:
            How many placements were adopted (0 when Redis cannot be read).
        """
        try:
            records = await placement_records(self._ctx.redis, self._ctx.keys)
        except RedisError as exc:
            logger.warning("could not read recorded placements to adopt: %s", exc)
            return 0
        placements = [a for a in records if a.worker_id != UNPLACED_WORKER]
        # One its worker already ended (its done event went unheard) is not sent again: a
        # worker that has forgotten it would run it a second time.
        ended = await ended_among(
            self._ctx.redis,
            self._ctx.keys,
            ((a.request.request.request_id, a.worker_id) for a in placements),
        )
        if ended:
            await self._forget_records(sorted(ended))
        now_model = self._ctx.clock.now()
        by_worker: dict[str, list[ClassifiedRequest]] = {}
        for held in placements:
            rid = held.request.request.request_id
            if ended and rid in ended:
                continue
            if self._registry.placed(held.request, held.worker_id, now_model):
                by_worker.setdefault(held.worker_id, []).append(held.request)
                self._adopted.add(rid)
        adopted = sum(len(reqs) for reqs in by_worker.values())
        if adopted:
            logger.info("adopting %d recorded placements on %d workers", adopted, len(by_worker))
            ADOPTED.inc(adopted)
            self._resend(by_worker)
        return adopted

    async def settle_unsure(self, unsure: list[Unsure]) -> list[ClassifiedRequest]:
        """Forget the ended; send the unanswered to their live worker again; return the
        rest, to re-queue.

        An unanswered dispatch may have been accepted (its reply lost), and its request may
        even have ended (its ``request.done`` lost too, as in a NATS restart): sent to
        another worker it would run twice. So the worker's ended record is read first; one
        not ended goes to the same worker again while that worker is alive (up to
        :data:`DISPATCH_RETRIES` times), and only then back to the queue.
        """
        ended = await ended_among(
            self._ctx.redis, self._ctx.keys, ((r.request.request_id, w) for r, w, _ in unsure)
        )
        if ended is None:
            # Unknown: running it again may answer twice, not running it may lose it.
            logger.warning(
                "%d unanswered placements not checked against ended records", len(unsure)
            )
            ended = set()
        back: list[ClassifiedRequest] = []
        taken: list[tuple[str, str]] = []  # back to the queue unanswered: may be held
        again: dict[str, list[ClassifiedRequest]] = {}
        registry = self._registry
        for req, worker_id, unanswered in unsure:
            rid = req.request.request_id
            tries = self._redispatches.pop(rid, 0)
            if rid not in ended and (
                unanswered
                and tries < DISPATCH_RETRIES
                and registry.alive(worker_id)
                and registry.holds(rid, worker_id)
            ):
                self._redispatches[rid] = tries + 1
                again.setdefault(worker_id, []).append(req)
            elif (flight := registry.release(rid)) is not None and rid not in ended:
                back.append(req)
                if unanswered:
                    taken.append((rid, flight.worker_id))
        if ended:
            self._ended_unheard(sorted(ended))
            await self._forget_records(sorted(ended))
        if again:
            logger.info("dispatching unanswered requests again to %s", sorted(again))
            self._resend(again)
        await revoke(self._ctx, taken, self._service)
        return back

    async def requeue_orphans(self, orphans: list[InFlight]) -> None:
        """Re-queue the requests of silent or restarted workers, except those the worker's
        record names as ended: their ``request.done`` went unheard, and they must not run
        twice. A Redis outage re-queues them all (losing one would be worse)."""
        pairs = ((o.request.request.request_id, o.worker_id) for o in orphans)
        ended = await ended_among(self._ctx.redis, self._ctx.keys, pairs) or set()
        kept = [o for o in orphans if o.request.request.request_id not in ended]
        if ended:
            self._ended_unheard(sorted(ended))  # already out of the registry
        if kept:
            logger.warning("%d requests orphaned by silent workers; re-queueing", len(kept))
            # Revoked first: a worker that was only frozen must find them revoked when it
            # wakes, before another worker can have run them (:mod:`.revocations`).
            await revoke(
                self._ctx,
                ((o.request.request.request_id, o.worker_id) for o in kept),
                self._service,
            )
            await self._scheduler.requeue([o.request for o in kept])

    async def audit_endings(self) -> None:
        """Free the slots of placements whose ending this router never heard.

        A ``request.done`` published while this router's connection was down is gone, and
        its request would hold its worker's slot for good (and run again should the worker
        later go silent). Accepted placements older than one audit period are looked up in
        the workers' ended records: one Redis round trip per period, none while every
        placement is younger.
        """
        period = self._ctx.settings.router.ended_audit_period_s
        suspects = self._registry.confirmed_before(time.time() - period)
        if not suspects:
            return
        ended = await ended_among(self._ctx.redis, self._ctx.keys, suspects)
        if not ended:
            return
        for rid in ended:
            self._free(rid)
        self._ended_unheard(sorted(ended))

    def _ended_unheard(self, request_ids: list[str]) -> None:
        """Count and log requests found ended in the workers' records; the scheduler
        forgets them."""
        logger.warning(
            "%d placed requests had ended unheard (their request.done was lost); freeing them",
            len(request_ids),
        )
        MISSED_ENDINGS.labels(self._service).inc(len(request_ids))
        self._scheduler.ended_unheard(request_ids)

    async def _forget_records(self, request_ids: list[str]) -> None:
        """Delete the placement records of ended requests (best effort: the scheduler's
        audit deletes what this misses)."""
        with contextlib.suppress(RedisError):
            await self._ctx.redis.hdel(self._ctx.keys.dispatched, *request_ids)
