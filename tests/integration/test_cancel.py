"""Cancelling a request wherever it is, on a real nats-server and redis-server.

The scheduler ends a cancelled request it holds, or one that reaches it after its cancel;
a worker aborts one it runs (its engine stops generating) or one whose dispatch comes after
its cancel; a cancel of a request nobody holds changes nothing (docs/protocol.md,
Cancellation). Each ending is one ``ErrorReply(code="cancelled")`` to the client and to
``request.done``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from proto.codec import decode_any, encode, request_endings
from proto.messages import CancelRequest, ClassifiedRequest, Completion, ErrorReply, TokenChunk
from proto.subjects import Subjects
from services.scheduler.service import SchedulerShell
from services.worker.factory import build_backend
from services.worker.service import WorkerShim
from shared.bus import connect_nats
from shared.cancels import CANCELLED_CODE, send_cancel
from shared.config import NatsSettings, Settings
from shared.counters import CANCELLED, ERRORS
from shared.lifecycle import ServiceContext, service_context
from shared.servers import ServerProcess
from shared.store import as_bytes
from tests.factories import client_request, connected_settings, no_ready, until

pytestmark = pytest.mark.connected

CLIENT = "c"


def _request(subjects: Subjects, rid: str, tokens: int = 5) -> ClassifiedRequest:
    return client_request(subjects, CLIENT, rid, output_tokens=tokens)


@dataclass
class _Ears:
    """What client ``c`` and the bookkeeping (``request.done``) hear."""

    client: list[msgspec.Struct] = field(default_factory=list)
    done: list[msgspec.Struct] = field(default_factory=list)

    def errors(self, where: str = "client") -> list[ErrorReply]:
        return [m for m in getattr(self, where) if isinstance(m, ErrorReply)]

    def tokens(self) -> int:
        return sum(len(m.token_times) for m in self.client if isinstance(m, TokenChunk))


@contextlib.asynccontextmanager
async def _listening(
    nats: ServerProcess, subjects: Subjects
) -> AsyncIterator[tuple[Client, _Ears]]:
    """A NATS client of ``c`` that records its replies and every ``request.done``."""
    ears = _Ears()
    nc = await connect_nats(NatsSettings(url=nats.url), "test-client")

    async def on_client(msg: Msg) -> None:
        ears.client.append(decode_any(msg.data))

    async def on_done(msg: Msg) -> None:
        ears.done.extend(request_endings(msg.data))

    await nc.subscribe(subjects.client_wildcard(CLIENT), cb=on_client)
    await nc.subscribe(subjects.request_done_wildcard, cb=on_done)
    await nc.flush()
    try:
        yield nc, ears
    finally:
        await nc.close()


def _cancelled(service: str, stage: str) -> float:
    value: float = CANCELLED.labels(service, stage)._value.get()
    return value


async def _queued_ids(ctx: ServiceContext) -> set[str]:
    return {as_bytes(k).decode() for k in await ctx.redis.hkeys(ctx.keys.queued)}


async def test_a_queued_request_is_ended_once_and_forgotten_and_its_neighbours_stay(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a cancel takes a queued request out of its queue and Redis, answers it once
    with ``cancelled`` (client and request.done), and leaves the other queued request."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("scheduler", settings) as ctx:
        shell = SchedulerShell(ctx, on_ready=no_ready)
        # As the co-located request path serves it (submit by method call); the separate
        # scheduler hears cancels the same way (tests/integration/test_gateway_cancel.py).
        subs = await shell.serve_subjects(requeue_only=True)
        async with _listening(nats_server, ctx.subjects) as (nc, ears):
            reply = await shell.submit([_request(ctx.subjects, "r1"), _request(ctx.subjects, "r2")])
            assert reply.accepted == ["c.r1", "c.r2"]
            before = _cancelled("scheduler", "queued")
            assert await send_cancel(nc, ctx.subjects, CLIENT, "r1", "client disconnected")
            await until(lambda: bool(ears.errors()) and bool(ears.errors("done")))
            await shell.forget_ended()
            await asyncio.sleep(0.2)  # a second answer would have come by now
            assert [(e.code, e.request_id) for e in ears.errors()] == [(CANCELLED_CODE, "r1")]
            assert [(e.code, e.request_id) for e in ears.errors("done")] == [
                (CANCELLED_CODE, "c.r1")
            ]
            assert _cancelled("scheduler", "queued") == before + 1
            assert len(shell.state.queue("p")) == 1
            assert await _queued_ids(ctx) == {"c.r2"}
            assert await ctx.redis.exists(ctx.keys.cancelled("c.r1"))
            # A repeated cancel of the ended request, and one of an unknown id: nothing more.
            await send_cancel(nc, ctx.subjects, CLIENT, "r1")
            await send_cancel(nc, ctx.subjects, CLIENT, "never-sent")
            await asyncio.sleep(0.3)
            assert len(ears.errors()) == 1
            assert len(shell.state.queue("p")) == 1
        for sub in subs:
            await sub.unsubscribe()


async def test_a_malformed_cancel_is_counted_and_dropped_and_later_cancels_still_work(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a cancel the scheduler cannot read (bad payload, or a subject token that is
    no client id) is dropped with ``greenserve_errors_total{scheduler, malformed}`` (fire
    and forget: nobody to answer), ends nothing, and the next valid cancel still works."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("scheduler", settings) as ctx:
        shell = SchedulerShell(ctx, on_ready=no_ready)
        subs = await shell.serve_subjects(requeue_only=True)
        async with _listening(nats_server, ctx.subjects) as (nc, ears):
            await shell.submit([_request(ctx.subjects, "r1")])
            malformed = ERRORS.labels("scheduler", "malformed")
            before = malformed._value.get()
            hostile = ctx.subjects.cancel_wildcard.removesuffix("*") + "a%b"
            await nc.publish(ctx.subjects.cancel(CLIENT), b"\x81\xa4type\xa6gs.v1.cancel")
            await nc.publish(hostile, encode(CancelRequest(request_id="r1")))
            await until(lambda: malformed._value.get() == before + 2)
            assert len(shell.state.queue("p")) == 1
            assert ears.errors() == []
            assert await send_cancel(nc, ctx.subjects, CLIENT, "r1")
            await until(lambda: bool(ears.errors()))
            assert [(e.code, e.request_id) for e in ears.errors()] == [(CANCELLED_CODE, "r1")]
            assert malformed._value.get() == before + 2
        for sub in subs:
            await sub.unsubscribe()


async def test_a_request_cancelled_before_its_hand_off_is_never_queued(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test the hand-off checks: a request submitted after its cancel (to the scheduler that
    heard it, and to a restarted one that only has the Redis mark) and one re-queued after
    its cancel are ended with ``cancelled`` and never queued; the classifier may ack them."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("scheduler", settings) as ctx:
        heard = SchedulerShell(ctx, on_ready=no_ready)
        async with _listening(nats_server, ctx.subjects) as (_nc, ears):
            await heard.cancel("c.early")
            await heard.cancel("c.refused")
            reply = await heard.submit([_request(ctx.subjects, "early")])
            assert reply.cancelled == ["c.early"]
            assert reply.accepted == []
            # A restarted scheduler knows nothing in memory; the mark in Redis ends it.
            await heard.cancel("c.late")
            restarted = SchedulerShell(ctx, on_ready=no_ready)
            reply = await restarted.submit([_request(ctx.subjects, "late")])
            assert reply.cancelled == ["c.late"]
            # Refused by a worker (or unplaced) after its cancel: ended, not queued again.
            await heard.requeue([_request(ctx.subjects, "refused")])
            await until(lambda: len(ears.errors()) == 3)
            await heard.forget_ended()
            assert sorted(e.request_id or "" for e in ears.errors()) == ["early", "late", "refused"]
            assert {e.code for e in ears.errors()} == {CANCELLED_CODE}
            assert not len(heard.state.queue("p"))
            assert not len(restarted.state.queue("p"))
            assert await _queued_ids(ctx) == set()
            # Its redelivery (same ingress message) is a duplicate: acked, not ended again.
            again = await restarted.submit([_request(ctx.subjects, "late")])
            assert again.duplicates == ["c.late"]
            await asyncio.sleep(0.2)
            assert len(ears.errors()) == 3


def _worker_settings(namespace: str, nats: ServerProcess, redis: ServerProcess) -> Settings:
    base = connected_settings(namespace, nats, redis)
    return base.model_copy(
        update={
            # Real time: a token every ~10-20 ms, so 2,000 tokens last well beyond the test.
            "clock": base.clock.model_copy(update={"speedup": 1.0}),
            "worker": base.worker.model_copy(
                update={"backend": "sim", "max_num_seqs": 4, "admission": False}
            ),
        }
    )


@contextlib.asynccontextmanager
async def _running_worker(settings: Settings) -> AsyncIterator[tuple[ServiceContext, WorkerShim]]:
    """A worker shim on the sim backend, its engine running and its cancels heard."""
    async with service_context("worker", settings) as ctx:
        shim = WorkerShim(ctx, build_backend(ctx.settings))
        await shim.backend.start(shim)
        engine = asyncio.create_task(shim.backend.run())
        flush = asyncio.create_task(shim.flush_loop())
        sub = await ctx.nc.subscribe(ctx.subjects.cancel_wildcard, cb=shim.on_cancel)
        try:
            yield ctx, shim
        finally:
            await sub.unsubscribe()
            for task in (engine, flush):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def test_a_running_request_stops_generating_and_frees_its_slot_and_kv(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a cancel aborts a request running on a simulated worker: far fewer tokens
    than max_tokens, its engine sequence and KV blocks freed, its slot advertised free, one
    ``cancelled`` ending (client and request.done), and no token generated after it."""
    max_tokens = 2000
    settings = _worker_settings(namespace, nats_server, redis_server)
    async with (
        _running_worker(settings) as (ctx, shim),
        _listening(nats_server, ctx.subjects) as (nc, ears),
    ):
        req = _request(ctx.subjects, "long", tokens=max_tokens)
        assert (await shim.on_dispatch(req, None)).accepted  # type: ignore[arg-type]
        await until(lambda: ears.tokens() >= 5)
        assert shim.stats().running == 1
        assert shim.stats().kv_blocks_used > 0
        before = _cancelled("worker", "running")
        await send_cancel(nc, ctx.subjects, CLIENT, "long", "client disconnected")
        await until(lambda: bool(ears.errors()) and bool(ears.errors("done")))
        generated = shim.stats().tokens_out
        await asyncio.sleep(0.5)  # ~30 tokens' time: the engine must produce none
        stats = shim.stats()
        assert await shim.ended_log.flush()
        ended = await ctx.redis.zscore(ctx.keys.ended(settings.worker.worker_id), "c.long")
    assert stats.tokens_out == generated
    assert generated < max_tokens // 4
    assert stats.running == 0
    assert stats.waiting == 0
    assert stats.kv_blocks_used == 0
    assert stats.free_slots == 4
    assert not len(shim.book)
    assert [(e.code, e.request_id, e.service) for e in ears.errors()] == [
        (CANCELLED_CODE, "long", "worker")
    ]
    assert [e.request_id for e in ears.errors("done")] == ["c.long"]
    assert not [m for m in ears.client if isinstance(m, Completion)]
    assert _cancelled("worker", "running") == before + 1
    assert ended is not None  # no adopting router dispatches it again


async def test_a_dispatch_after_its_cancel_is_ended_unrun_and_a_finished_one_stays_finished(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test the worker's side of the races: a dispatch that arrives after its cancel is
    accepted and ended at once, never run; a cancel of a request that already finished
    (or that the worker never saw) sends nothing."""
    settings = _worker_settings(namespace, nats_server, redis_server)
    async with (
        _running_worker(settings) as (ctx, shim),
        _listening(nats_server, ctx.subjects) as (nc, ears),
    ):
        assert not await shim.cancel("c.placed")  # heard while its dispatch is on the way
        short = _request(ctx.subjects, "short", tokens=3)
        assert (await shim.on_dispatch(short, None)).accepted  # type: ignore[arg-type]
        await until(lambda: any(isinstance(m, Completion) for m in ears.client))
        placed = _request(ctx.subjects, "placed", 500)
        reply = await shim.on_dispatch(placed, None)  # type: ignore[arg-type]
        assert reply.accepted
        assert not len(shim.book)
        assert shim.stats().running == 0
        await send_cancel(nc, ctx.subjects, CLIENT, "short")  # finished already
        await send_cancel(nc, ctx.subjects, CLIENT, "unknown")
        await until(lambda: len(ears.errors("done")) >= 1)
        await asyncio.sleep(0.3)
    assert [(e.code, e.request_id) for e in ears.errors()] == [(CANCELLED_CODE, "placed")]
    assert [e.request_id for e in ears.errors("done")] == ["c.placed"]
    assert [m.request_id for m in ears.client if isinstance(m, Completion)] == ["short"]
    assert ears.tokens() == 3
