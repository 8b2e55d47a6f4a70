"""Dispatch: hand placed requests to their workers over NATS and read their answers.

One request/reply per worker and round where possible (a batch saves two NATS messages
and a reply future per request); a traced request goes alone, so its dispatch span stays
the parent of its worker's span, and so does every request to a worker that serves no
batches (an older version). Each answer is an :data:`Outcome`; what to do with it
(record, re-queue) is the router shell's (``services/router/service.py``), and sending
again what went unanswered is recovery's (``services/router/recovery.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from typing import Final, TypeAlias

import nats.errors
from opentelemetry import trace

from proto.codec import DecodeError
from proto.leases import lease_headers
from proto.messages import (
    Assignment,
    ClassifiedRequest,
    DispatchBatch,
    DispatchBatchReply,
    DispatchReply,
)
from services.router.registry import WorkerRegistry
from shared.bus import request, tracing_active
from shared.counters import ERRORS
from shared.lifecycle import ServiceContext
from shared.telemetry import extract_context, request_attributes

__all__ = ["UNANSWERED", "Dispatcher", "Outcome", "Unanswered"]

logger = logging.getLogger(__name__)


class Unanswered(enum.Enum):
    """A dispatch whose reply never came (a timeout, a NATS outage, the worker gone): the
    worker may hold the request, or may have run it already."""

    NO_REPLY = "no reply"


UNANSWERED: Final = Unanswered.NO_REPLY
Outcome: TypeAlias = Assignment | bool | Unanswered | None
"""Of one dispatch: the Assignment (accepted), True (it had already ended), ``UNANSWERED``,
or None (refused: it did not run there)."""


class Dispatcher:
    """Request/reply dispatches to workers; confirms accepted placements in the registry."""

    def __init__(
        self, ctx: ServiceContext, registry: WorkerRegistry, tracer: trace.Tracer, service: str
    ) -> None:
        """Dispatch over ``ctx.nc``; errors count under ``service``."""
        self._ctx = ctx
        self._registry = registry
        self._tracer = tracer
        self._service = service
        self._no_batch: dict[str, float | None] = {}
        """Workers whose current run answers single dispatches but not batches (an older
        version), with that run's ``started_at``: a restart, perhaps an upgrade, is tried
        with batches again."""

    async def dispatch_all(self, placed: list[tuple[ClassifiedRequest, str]]) -> list[Outcome]:
        """Dispatch a round's placements (their slots already taken in the registry): one
        batch per worker where possible.

        A batch saves a request/reply (two NATS messages, a reply future) per request. A
        traced request goes alone, so its dispatch span stays the parent of its worker's
        span; so does a worker's only request of the round, and every request to a worker
        that does not serve batches (an older version).
        """
        by_worker: dict[str, list[int]] = {}
        for i, (req, worker_id) in enumerate(placed):
            if not tracing_active(req.trace) and self._serves_batches(worker_id):
                by_worker.setdefault(worker_id, []).append(i)
        batches = {w: idx for w, idx in by_worker.items() if len(idx) > 1}
        batched = {i for idx in batches.values() for i in idx}
        results: list[Outcome] = [None] * len(placed)
        singles = [i for i in range(len(placed)) if i not in batched]
        alone, together = await asyncio.gather(
            asyncio.gather(*(self._dispatch(placed[i][0], placed[i][1]) for i in singles)),
            asyncio.gather(
                *(
                    self._dispatch_batch(w, [placed[i][0] for i in idx])
                    for w, idx in batches.items()
                )
            ),
        )
        for i, one in zip(singles, alone, strict=True):
            results[i] = one
        for idx, many in zip(batches.values(), together, strict=True):
            for i, one in zip(idx, many, strict=True):
                results[i] = one
        return results

    def _serves_batches(self, worker_id: str) -> bool:
        """False while the worker's run is one seen answering singles but not batches."""
        if worker_id not in self._no_batch:
            return True
        if self._no_batch[worker_id] == self._registry.started_at(worker_id):
            return False
        del self._no_batch[worker_id]  # restarted (perhaps upgraded) or gone: try again
        return True

    async def _dispatch_batch(
        self, worker_id: str, requests: list[ClassifiedRequest]
    ) -> list[Outcome]:
        """Hand several requests to one worker in one request/reply."""
        ctx = self._ctx
        try:
            reply = await request(
                ctx.nc,
                ctx.subjects.worker_dispatch_batch(worker_id),
                DispatchBatch(requests=requests),
                DispatchBatchReply,
                ctx.settings.nats.request_timeout_s,
                headers=self._lease(),
            )
        except nats.errors.NoRespondersError:
            outcomes = list(await asyncio.gather(*(self._dispatch(r, worker_id) for r in requests)))
            # Nobody on the batch subject may be an older version, or a worker between runs
            # (or gone): only one that answers a single dispatch is an older version, else
            # a restarted worker would lose batching for good.
            if any(o is not UNANSWERED for o in outcomes):
                logger.info("worker %s serves no dispatch batches; one by one", worker_id)
                self._no_batch[worker_id] = self._registry.started_at(worker_id)
            return outcomes
        except (nats.errors.TimeoutError, DecodeError) as exc:
            ERRORS.labels(self._service, "dispatch_failed").inc(len(requests))
            logger.warning(
                "dispatch of %d requests to %s failed: %s", len(requests), worker_id, exc
            )
            return [UNANSWERED] * len(requests)
        if len(reply.replies) != len(requests):
            ERRORS.labels(self._service, "dispatch_failed").inc(len(requests))
            logger.warning(
                "worker %s answered a batch of %d with %d replies",
                worker_id,
                len(requests),
                len(reply.replies),
            )
            return [UNANSWERED] * len(requests)
        return [
            self._settle(req, worker_id, one)
            for req, one in zip(requests, reply.replies, strict=True)
        ]

    async def _dispatch(self, req: ClassifiedRequest, worker_id: str) -> Outcome:
        """Hand one request to a worker (:data:`Outcome`)."""
        ctx = self._ctx
        rid = req.request.request_id
        # A no-op span still costs a context attach and a header extraction per request.
        span: contextlib.AbstractContextManager[object] = (
            self._tracer.start_as_current_span(
                "dispatch",
                context=extract_context(req.trace),
                attributes={**request_attributes(rid), "worker.id": worker_id},
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
                    headers=self._lease(),
                )
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, DecodeError) as exc:
                ERRORS.labels(self._service, "dispatch_failed").inc()
                logger.warning("dispatch of %s to %s failed: %s", rid, worker_id, exc)
                return UNANSWERED
        return self._settle(req, worker_id, reply)

    def _lease(self) -> dict[str, str]:
        """The lease header of a dispatch sent now (``router.lease_s`` from now, wall).

        A worker frozen past it refuses the dispatch: by then this router may have called
        the worker silent and placed the request elsewhere (``docs/routing.md``, Leases).
        """
        return lease_headers(time.time() + self._ctx.settings.router.lease_s)

    def _settle(self, req: ClassifiedRequest, worker_id: str, reply: DispatchReply) -> Outcome:
        """A worker's answer for one request: its Assignment, True if it already ended, None
        if refused."""
        if not reply.accepted:
            logger.info("worker %s refused %s: %s", worker_id, req.request.request_id, reply.reason)
            return None
        if not self._registry.confirm(req.request.request_id, reply.accepted_at):
            return True  # it already finished; nothing left to record
        return Assignment(request=req, worker_id=worker_id, dispatched_at=reply.accepted_at)
