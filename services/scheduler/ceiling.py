"""The scheduler's ceiling: a bounded queue per pool and a bound on each request's wait.

Without it a stack offered more than it serves queued every request: 10× capacity over
NATS for a minute left requests waiting up to 228 s with no answer, and the queues (in
memory and in Redis) grew without end. With it, overload is answered within seconds:

* a request whose pool already queues ``scheduler.max_queued_per_pool`` is not queued but
  ended at its hand-off with ``ErrorReply(code="overloaded")`` (why ``queue_full``);
* a request queued longer than ``scheduler.max_queue_wait_s`` (wall) is taken out and
  ended the same way (why ``queue_wait``), so nothing waits in a queue without bound.

The wait counts from the request's first entry into this scheduler's queues (a requeue
keeps it): a request that waited in the ingress stream through a Redis outage is not shed
on its arrival for time it spent where the scheduler could not serve it.

A shed request was stored and marked seen first, so a redelivery of its ingress message
is a duplicate (acked, not answered twice); its error goes to its client and to
``request.done`` like any ending, and its records are forgotten with the ended ones.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import Final

from prometheus_client import Counter

from proto.messages import ClassifiedRequest
from services.scheduler.pool_queues import SchedulerState

__all__ = ["OVERLOADED_CODE", "QUEUE_FULL", "QUEUE_WAIT", "SHED", "Ceiling"]

OVERLOADED_CODE: Final = "overloaded"
"""Error code of a request refused or dropped by the ceiling (the gateway's 429 code)."""
QUEUE_FULL: Final = "queue_full"
QUEUE_WAIT: Final = "queue_wait"

SHED: Final = Counter(
    "greenserve_scheduler_shed_total",
    "Requests the scheduler's ceiling ended with overloaded, by pool and why: queue_full "
    "(refused at the hand-off) or queue_wait (queued past scheduler.max_queue_wait_s)",
    ["pool", "why"],
)


class Ceiling:
    """Which requests the queue bound refuses and which waited too long (pure but for the
    monotonic clock, which tests pass in)."""

    def __init__(self, max_queued_per_pool: int, max_queue_wait_s: float) -> None:
        """Refuse beyond ``max_queued_per_pool`` per pool; drop waits past ``max_queue_wait_s``."""
        if max_queued_per_pool < 1 or max_queue_wait_s <= 0:
            raise ValueError("the ceiling needs a queue of at least 1 and a positive wait")
        self._max_queued = max_queued_per_pool
        self._max_wait_s = max_queue_wait_s
        self._entered: dict[str, float] = {}
        """First entry (monotonic s) of each request held, oldest first (insertion order:
        a requeue keeps its first entry)."""

    def __len__(self) -> int:
        """Requests whose entry time is held (queued or placed, until they end)."""
        return len(self._entered)

    def admit(
        self, state: SchedulerState, requests: Iterable[ClassifiedRequest], now: float | None = None
    ) -> tuple[list[ClassifiedRequest], list[ClassifiedRequest]]:
        """Split new requests into those their pools have room for and those refused.

        Admitted ones are noted as entering now; the caller queues them.
        """
        at = time.monotonic() if now is None else now
        room: dict[str, int] = {}
        kept: list[ClassifiedRequest] = []
        refused: list[ClassifiedRequest] = []
        for req in requests:
            pool = req.pool_id
            if pool not in room:
                room[pool] = self._max_queued - len(state.queue(pool))
            if room[pool] <= 0:
                refused.append(req)
                SHED.labels(pool, QUEUE_FULL).inc()
                continue
            room[pool] -= 1
            self._entered.setdefault(req.request.request_id, at)
            kept.append(req)
        return kept, refused

    def entered(self, request_ids: Iterable[str], now: float | None = None) -> None:
        """Note requests queued by another way (a restore, a requeue); a known one keeps
        its first entry."""
        at = time.monotonic() if now is None else now
        for rid in request_ids:
            self._entered.setdefault(rid, at)

    def ended(self, request_id: str) -> None:
        """Forget a request that ended."""
        self._entered.pop(request_id, None)

    def expired(self, state: SchedulerState, now: float | None = None) -> list[ClassifiedRequest]:
        """Take every queued request that entered more than the wait bound ago out of its
        queue and return them (placed ones are left alone: they are running)."""
        at = time.monotonic() if now is None else now
        out: list[ClassifiedRequest] = []
        # Insertion order is entry order: the old ones come first, and only they are read
        # (placed ones among them stay until they end: a running request holds a slot).
        old = list(
            itertools.takewhile(
                lambda entry: at - entry[1] > self._max_wait_s, self._entered.items()
            )
        )
        for rid, _entered_at in old:
            req = state.take(rid)
            if req is not None:
                self._entered.pop(rid, None)
                SHED.labels(req.pool_id, QUEUE_WAIT).inc()
                out.append(req)
        return out

    def reason(self, why: str, req: ClassifiedRequest) -> str:
        """The error's text: what was full or how long it waited, and what to do."""
        if why == QUEUE_FULL:
            return (
                f"{QUEUE_FULL}: pool {req.pool_id} queues its limit of {self._max_queued} "
                "requests; retry later"
            )
        return (
            f"{QUEUE_WAIT}: queued longer than {self._max_wait_s:g} s in pool {req.pool_id}; "
            "retry later"
        )
