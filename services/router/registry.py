"""The router's view of workers: stats heartbeats plus its own in-flight bookkeeping.

Free slots come from the router's own count of requests it dispatched and has not seen end
(stats lag behind by up to one period, and two quick placements must not both take the
last slot); the worker's stats add KV use and liveness.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from proto.messages import ClassifiedRequest, WorkerStats
from services.router.placement import WorkerLoad
from services.router.placement_step import lookahead_remaining_tokens

__all__ = ["EARLY_END_MEMORY_S", "InFlight", "WorkerRegistry"]

EARLY_END_MEMORY_S: Final = 60.0
"""How long the router remembers an ending it heard for a request it did not hold.

Such a mark is used by a later :meth:`WorkerRegistry.placed` of the same id, and only two
placements can come after their request's ending, both decided on a read made before the
ending reached it:

* a pull: the scheduler popped the request before it heard the ending itself (NATS
  delivery, milliseconds) and its reply travels back; the router drops a reply later
  than ``nats.request_timeout_s`` (2 s);
* an adoption at start-up (:meth:`services.router.recovery.Recovery.adopt`): the
  placement records and the workers' ended records are read while endings already arrive,
  two or three Redis calls of up to ``redis.socket_timeout_s`` (2 s) per try, redis-py
  retrying a timed-out one.

60 s covers both with a wide margin for a stalled event loop. Everything else that lands
here is never placed afterwards (cancels and sheds of requests the scheduler held, the
classifier's refusals, endings sent again), so it must expire instead of piling up: at
2,000 such endings a second this is about 120,000 ids (some 20 MB). A mark that expired
too early costs a dispatch (answered from the worker's memory, or run again if it forgot
the request), never a slot: the ending that dispatch brings frees it.
"""


@dataclass(slots=True)
class InFlight:
    """A request the router placed on a worker."""

    request: ClassifiedRequest
    worker_id: str
    placed_model_s: float
    confirmed: bool = False
    """The worker accepted it (until then its dispatch is on the wire)."""
    accepted_at: float = 0.0
    """Wall time the worker accepted it (its own clock, as its ``started_at``)."""
    placed_wall_s: float = 0.0
    """Wall time this router placed it (its own clock)."""


@dataclass(slots=True)
class _Worker:
    stats: WorkerStats
    seen_wall_s: float
    requests: set[str] = field(default_factory=set)


class WorkerRegistry:
    """Workers by pool, their liveness and the requests placed on them."""

    def __init__(
        self,
        timeout_s: float,
        *,
        early_end_memory_s: float = EARLY_END_MEMORY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Workers silent for ``timeout_s`` wall seconds are gone; endings of requests not
        held are remembered ``early_end_memory_s`` seconds of ``monotonic``."""
        self._timeout_s = timeout_s
        self._workers: dict[str, _Worker] = {}
        self._inflight: dict[str, InFlight] = {}
        self._early_end_memory_s = early_end_memory_s
        self._monotonic = monotonic
        self._ended_early: dict[str, float] = {}
        """Ids that ended while not held here, and when (monotonic), oldest first: a
        placement decided before its ending arrived must not take a slot
        (:data:`EARLY_END_MEMORY_S`)."""
        self._lost_to_restarts: list[InFlight] = []
        """Requests an earlier run of a restarted worker had accepted (see :meth:`update`)."""

    def update(self, stats: WorkerStats, now_wall_s: float) -> None:
        """Record a heartbeat.

        A worker restarted under the same id within the heartbeat timeout never looks
        silent, yet holds none of what its earlier run accepted: a later ``started_at``
        orphans those requests (:meth:`expire` hands them back with the silent workers').
        """
        worker = self._workers.get(stats.worker_id)
        if worker is not None and stats.started_at > worker.stats.started_at > 0.0:
            lost = [
                flight
                for rid in worker.requests
                if (flight := self._inflight.get(rid)) is not None
                and flight.confirmed
                and flight.accepted_at < stats.started_at
            ]
            for flight in lost:
                rid = flight.request.request.request_id
                del self._inflight[rid]
                worker.requests.discard(rid)
            self._lost_to_restarts += lost
        if worker is None:
            # Requests placed before its first heartbeat (adopted after a restart) count as
            # its own from now on, so they take its slots and are orphaned if it goes silent.
            mine = {rid for rid, f in self._inflight.items() if f.worker_id == stats.worker_id}
            self._workers[stats.worker_id] = _Worker(stats, now_wall_s, mine)
        else:
            worker.stats = stats
            worker.seen_wall_s = now_wall_s

    def placed(self, request: ClassifiedRequest, worker_id: str, now_model_s: float) -> bool:
        """Take a slot for a request placed on a worker; False if it has already ended.

        The router calls this when it places, before the worker's answer, so a placement
        round need not wait for dispatch replies; :meth:`release` undoes a refusal.
        """
        rid = request.request.request_id
        ended_at = self._ended_early.pop(rid, None)
        if ended_at is not None and self._monotonic() - ended_at <= self._early_end_memory_s:
            return False
        self._inflight[rid] = InFlight(request, worker_id, now_model_s, placed_wall_s=time.time())
        worker = self._workers.get(worker_id)
        if worker is not None:
            worker.requests.add(rid)
        return True

    def ended(self, request_id: str) -> InFlight | None:
        """Forget a finished request; return what was known of it."""
        flight = self._inflight.pop(request_id, None)
        if flight is None:
            self._remember_early_end(request_id)
        else:
            worker = self._workers.get(flight.worker_id)
            if worker is not None:
                worker.requests.discard(request_id)
        return flight

    def early_ends(self) -> int:
        """How many endings of requests not held are remembered now."""
        return len(self._ended_early)

    def _remember_early_end(self, request_id: str) -> None:
        """Note an ending heard for a request not held; forget those past the memory.

        The dict stays ordered by time (a repeated id moves to the young end), so the
        expired ones are at its old end: each ending trims at most what expired since.
        """
        now = self._monotonic()
        marks = self._ended_early
        marks.pop(request_id, None)
        marks[request_id] = now
        cutoff = now - self._early_end_memory_s
        while (oldest := next(iter(marks))) != request_id and marks[oldest] < cutoff:
            del marks[oldest]

    def confirm(self, request_id: str, accepted_at: float = 0.0) -> bool:
        """The worker accepted the request (at ``accepted_at``, its wall clock); False if it
        has ended (or was released) since."""
        flight = self._inflight.get(request_id)
        if flight is None:
            return False
        flight.confirmed = True
        flight.accepted_at = accepted_at
        return True

    def release(self, request_id: str) -> InFlight | None:
        """Undo a placement its worker refused (or never answered); None if already gone.

        Unlike :meth:`ended` this leaves no early-end mark: the request did not run.
        """
        flight = self._inflight.pop(request_id, None)
        if flight is not None:
            worker = self._workers.get(flight.worker_id)
            if worker is not None:
                worker.requests.discard(request_id)
        return flight

    def expire(self, now_wall_s: float, heard_since_wall_s: float = 0.0) -> list[InFlight]:
        """Drop workers silent for longer than the timeout; return their orphaned requests
        and those of restarted workers.

        Silence counts from ``heard_since_wall_s`` at the earliest: since when the router
        could hear heartbeats (its NATS connection back after an outage). While the router
        itself was cut off, a worker's silence says nothing about the worker, and orphaning
        requests it still runs would run them twice.
        """
        orphans, self._lost_to_restarts = self._lost_to_restarts, []
        for worker_id, worker in list(self._workers.items()):
            if now_wall_s - max(worker.seen_wall_s, heard_since_wall_s) > self._timeout_s:
                del self._workers[worker_id]
                # A request whose dispatch is still on the wire is not orphaned here: its
                # dispatch either times out (released and re-queued) or is accepted.
                orphans.extend(
                    self._inflight.pop(rid)
                    for rid in worker.requests
                    if rid in self._inflight and self._inflight[rid].confirmed
                )
        return orphans

    def confirmed_before(self, cutoff_wall_s: float) -> list[tuple[str, str]]:
        """(request id, worker id) of the accepted placements made before ``cutoff_wall_s``:
        those whose ending may have gone unheard (:mod:`shared.ended_lookup`)."""
        return [
            (rid, flight.worker_id)
            for rid, flight in self._inflight.items()
            if flight.confirmed and flight.placed_wall_s < cutoff_wall_s
        ]

    def held(self) -> list[InFlight]:
        """Every placement held (the write-back after a Redis that lost its data)."""
        return list(self._inflight.values())

    def holds(self, request_id: str, worker_id: str) -> bool:
        """Whether the request is still placed on that worker (not ended, released or
        orphaned since)."""
        flight = self._inflight.get(request_id)
        return flight is not None and flight.worker_id == worker_id

    def started_at(self, worker_id: str) -> float | None:
        """When the worker's current run started (its own clock), None if not alive."""
        worker = self._workers.get(worker_id)
        return None if worker is None else worker.stats.started_at

    def alive(self, worker_id: str) -> bool:
        """Whether the worker has not gone silent (nor was never heard of)."""
        return worker_id in self._workers

    def workers_of(self, pool_id: str) -> list[str]:
        """Ids of a pool's live, non-draining workers."""
        return [
            worker_id
            for worker_id, worker in self._workers.items()
            if worker.stats.pool_id == pool_id and not worker.stats.draining
        ]

    def pools(self) -> set[str]:
        """Pools that have at least one live worker."""
        return {w.stats.pool_id for w in self._workers.values() if not w.stats.draining}

    def loads(self, pool_id: str, now_model_s: float) -> list[WorkerLoad]:
        """Snapshot of a pool's live workers for a placement decision."""
        loads: list[WorkerLoad] = []
        for worker_id, worker in self._workers.items():
            stats = worker.stats
            if stats.pool_id != pool_id or stats.draining:
                continue
            remaining: list[int] = []
            for rid in worker.requests:
                flight = self._inflight[rid]
                remaining.append(
                    lookahead_remaining_tokens(
                        flight.request.predicted_output_tokens,
                        flight.placed_model_s,
                        flight.request.profile_tbt_ms / 1000.0,
                        now_model_s,
                    )
                )
            free = max(0, stats.max_num_seqs - len(worker.requests))
            loads.append(
                WorkerLoad(
                    worker_id=worker_id,
                    free_slots=free,
                    running=len(worker.requests),
                    kv_tokens=stats.kv_blocks_used * stats.kv_block_size,
                    predicted_remaining=tuple(remaining),
                    model=stats.model,
                )
            )
        return loads
