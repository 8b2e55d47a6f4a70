"""Which workers the router sends dispatch batches to, on real NATS.

A worker that answers single dispatches but has nobody on its batch subject is an older
version and gets its requests one by one; a worker with nobody on either subject (between
runs, or gone) is not, and a restarted worker is tried with batches again.
"""

from __future__ import annotations

import time

import pytest
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from proto.messages import (
    ClassifiedRequest,
    DispatchBatch,
    DispatchBatchReply,
    DispatchReply,
    WorkerStats,
)
from services.router.dispatch import UNANSWERED, Dispatcher
from services.router.registry import WorkerRegistry
from shared.bus import serve
from shared.lifecycle import ServiceContext, service_context
from shared.servers import ServerProcess
from tests.factories import classified_request, worker_stats
from tests.integration.test_missed_endings import _settings

pytestmark = pytest.mark.connected


class _Worker:
    """Dispatch subjects of worker ``w1``, counting what arrives on each."""

    def __init__(self, ctx: ServiceContext) -> None:
        self._ctx = ctx
        self.singles = 0
        self.batches = 0
        self._subs: list[Subscription] = []

    def _accept(self, req: ClassifiedRequest) -> DispatchReply:
        return DispatchReply(
            request_id=req.request.request_id,
            worker_id="w1",
            accepted=True,
            accepted_at=time.time(),
        )

    async def start(self, *, batches: bool) -> None:
        async def on_single(req: ClassifiedRequest, _msg: Msg) -> DispatchReply:
            self.singles += 1
            return self._accept(req)

        async def on_batch(batch: DispatchBatch, _msg: Msg) -> DispatchBatchReply:
            self.batches += 1
            return DispatchBatchReply(replies=[self._accept(r) for r in batch.requests])

        subjects = self._ctx.subjects
        self._subs.append(
            await serve(
                self._ctx.nc, subjects.worker_dispatch("w1"), ClassifiedRequest, on_single,
                service="t",
            )
        )  # fmt: skip
        if batches:
            self._subs.append(
                await serve(
                    self._ctx.nc, subjects.worker_dispatch_batch("w1"), DispatchBatch, on_batch,
                    service="t",
                )
            )  # fmt: skip

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        self._subs.clear()


def _heartbeat(started_at: float) -> WorkerStats:
    return worker_stats("w1", max_num_seqs=64, free_slots=64, started_at=started_at)


async def _round(dispatcher: Dispatcher, registry: WorkerRegistry, *ids: str) -> list[object]:
    placed = [(classified_request(rid), "w1") for rid in ids]
    for req, worker_id in placed:
        assert registry.placed(req, worker_id, 0.0)
    return list(await dispatcher.dispatch_all(placed))


async def test_only_a_worker_that_answers_singles_is_sent_them_for_good_and_a_restart_resets_it(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test: nobody listening at all leaves batching on; an older worker (singles only) gets
    singles from then on; the same worker id restarted with batches gets batches again."""
    settings = _settings(namespace, nats_server, redis_server)
    async with service_context("router", settings) as ctx:
        registry = WorkerRegistry(60.0)
        registry.update(_heartbeat(started_at=100.0), time.time())
        dispatcher = Dispatcher(ctx, registry, ctx.tracer, "router")
        worker = _Worker(ctx)

        # Between runs: no responder on either subject.
        outcomes = await _round(dispatcher, registry, "a1", "a2")
        assert outcomes == [UNANSWERED, UNANSWERED]
        await worker.start(batches=True)
        await _round(dispatcher, registry, "b1", "b2")
        assert (worker.batches, worker.singles) == (1, 0)  # batching was not given up
        await worker.stop()

        # An older version: singles only, so singles from now on (no batch attempt first).
        await worker.start(batches=False)
        await _round(dispatcher, registry, "c1", "c2")
        assert worker.singles == 2
        await _round(dispatcher, registry, "d1", "d2")
        assert worker.singles == 4
        await worker.stop()

        # Upgraded and restarted under the same id: batches again.
        registry.update(_heartbeat(started_at=200.0), time.time())
        await worker.start(batches=True)
        await _round(dispatcher, registry, "e1", "e2")
        assert (worker.batches, worker.singles) == (2, 4)
        await worker.stop()
