"""The scheduler's queues, one per pool, ranked by the configured discipline (pure).

The shell (:mod:`services.scheduler.service`) persists every change to Redis; this state
is what it rebuilds from there after a restart. The disciplines (FCFS, least laxity first,
speculative shortest job first) are :mod:`services.scheduler.queueing`'s; the emergency
ladder's REORDER rung re-ranks one pool's queue by another
(:meth:`SchedulerState.switch_discipline`).
"""

from __future__ import annotations

from proto.messages import ClassifiedRequest
from services.scheduler.queueing import (
    QueueDiscipline,
    QueuedRequest,
    make_discipline,
    pop_best,
)

__all__ = ["SchedulerState"]


class SchedulerState:
    """Queues per pool (pure; the shell persists every change to Redis)."""

    def __init__(self, discipline: str) -> None:
        self._discipline = discipline
        self._queues: dict[str, QueueDiscipline] = {}

    def queue(self, pool_id: str) -> QueueDiscipline:
        """The queue of one pool, created on first use."""
        q = self._queues.get(pool_id)
        if q is None:
            q = self._queues[pool_id] = make_discipline(self._discipline)
        return q

    def push(self, request: ClassifiedRequest) -> None:
        """Queue a request in its pool."""
        self.queue(request.pool_id).push(
            QueuedRequest(
                request_id=request.request.request_id,
                arrival_s=request.arrival_s,
                prompt_tokens=request.input_tokens,
                predicted_output_tokens=request.predicted_output_tokens,
                ttft_s=request.profile_ttft_ms / 1000.0,
                tbt_s=request.profile_tbt_ms / 1000.0,
                payload=request,
            )
        )

    def pop(self, pool_id: str, slots: int, now_s: float) -> list[ClassifiedRequest]:
        """Remove up to ``slots`` requests, best first by the discipline
        (:func:`~services.scheduler.queueing.pop_best`)."""
        out: list[ClassifiedRequest] = []
        for item in pop_best(self.queue(pool_id), slots, now_s):
            assert isinstance(item.payload, ClassifiedRequest)  # push stores nothing else
            out.append(item.payload)
        return out

    def switch_discipline(self, pool_id: str, name: str | None, now_s: float) -> bool:
        """Re-rank one pool's queue by ``name`` (None: the configured discipline).

        Used by the emergency ladder's REORDER rung; returns False when nothing changed.
        """
        wanted = name or self._discipline
        current = self.queue(pool_id)
        if current.name == wanted:
            return False
        fresh = make_discipline(wanted)
        for item in current.ordered(now_s):
            fresh.push(item)
        self._queues[pool_id] = fresh
        return True

    def take(self, request_id: str) -> ClassifiedRequest | None:
        """Remove a queued request from whichever pool holds it; return its message."""
        for q in self._queues.values():
            item = q.remove(request_id)
            if item is not None:
                assert isinstance(item.payload, ClassifiedRequest)  # push stores nothing else
                return item.payload
        return None

    def remove(self, request_id: str) -> bool:
        """Drop a queued request from whichever pool holds it."""
        return self.take(request_id) is not None

    def held(self) -> list[ClassifiedRequest]:
        """Every queued request, in no particular order (the write-back after a Redis that
        lost its data, :mod:`services.scheduler.store_loss`)."""
        out: list[ClassifiedRequest] = []
        for q in self._queues.values():
            for item in q.ordered(0.0):
                assert isinstance(item.payload, ClassifiedRequest)  # push stores nothing else
                out.append(item.payload)
        return out

    def backlog(self) -> dict[str, int]:
        """Queued requests per pool (non-empty pools only)."""
        return {pool: len(q) for pool, q in self._queues.items() if len(q)}
