"""A worker counts each cancelled request once, however often its ending is sent, on a real
nats-server and redis-server.

A dispatch that arrives after its cancel is accepted and ended at once (docs/protocol.md,
Cancellation). When its reply is lost, the router sends the dispatch again, and the worker
ends the request again, deliberately (the first ending may be what was lost). The request
was cancelled once: ``greenserve_cancelled_total{service="worker"}`` must say so.
"""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg

from proto.messages import ClassifiedRequest
from proto.subjects import Subjects
from services.worker.factory import build_backend
from services.worker.service import WorkerShim
from shared.cancels import CANCELLED_CODE
from shared.config import Settings
from shared.counters import CANCELLED
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests.factories import client_request, connected_settings, error_replies, until

pytestmark = pytest.mark.connected

CLIENT = "c"


def _request(subjects: Subjects, rid: str) -> ClassifiedRequest:
    return client_request(subjects, CLIENT, rid, output_tokens=50)


def _sim_worker(settings: Settings) -> Settings:
    """A worker on the simulated engine, with no admission gate to refuse a dispatch."""
    worker = settings.worker.model_copy(update={"backend": "sim", "admission": False})
    return settings.model_copy(update={"worker": worker})


def _counted() -> tuple[float, float]:
    dispatch: float = CANCELLED.labels("worker", "dispatch")._value.get()
    running: float = CANCELLED.labels("worker", "running")._value.get()
    return dispatch, running


async def test_a_dispatch_sent_again_after_its_cancel_is_ended_again_but_counted_once(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a dispatch repeated after its cancel (its reply lost) gets its ending
    again and is counted once, and that a repeated dispatch of a request the worker aborted
    while it ran is ended again without being counted a second time."""
    settings = _sim_worker(connected_settings(namespace, nats_server, redis_server))
    async with service_context("worker", settings) as ctx:
        endings, sub = await error_replies(ctx.nc, ctx.subjects.client_wildcard(CLIENT))
        shim = WorkerShim(ctx, build_backend(ctx.settings))  # engine not run: nothing finishes
        before = _counted()
        # Its cancel came first; the dispatch is sent three times (two replies lost).
        assert not await shim.cancel("c.late")
        for _ in range(3):
            assert (await shim.on_dispatch(_request(ctx.subjects, "late"), None)).accepted  # type: ignore[arg-type]
        # Cancelled while it ran here, then its dispatch sent again (that reply lost).
        running = _request(ctx.subjects, "running")
        assert (await shim.on_dispatch(running, None)).accepted  # type: ignore[arg-type]
        assert await shim.cancel("c.running")
        assert (await shim.on_dispatch(running, None)).accepted  # type: ignore[arg-type]
        await until(lambda: len(endings) == 5)
        await asyncio.sleep(0.2)  # another ending would have come by now
        await sub.unsubscribe()
    assert sorted((e.code, e.request_id) for e in endings) == [
        *[(CANCELLED_CODE, "late")] * 3,
        *[(CANCELLED_CODE, "running")] * 2,
    ]
    assert not len(shim.book)
    assert _counted() == (before[0] + 1, before[1] + 1)


async def test_a_malformed_cancel_is_counted_by_the_worker_and_ends_nothing(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a cancel the worker cannot read (a bad payload, a subject token that is no
    client id) leaves ``greenserve_errors_total{worker, malformed}``, its only trace (fire
    and forget), and that a running request stays until a valid cancel ends it."""
    from proto.codec import encode
    from proto.messages import CancelRequest
    from shared.counters import ERRORS

    settings = _sim_worker(connected_settings(namespace, nats_server, redis_server))
    async with service_context("worker", settings) as ctx:
        shim = WorkerShim(ctx, build_backend(ctx.settings))
        assert (await shim.on_dispatch(_request(ctx.subjects, "r1"), None)).accepted  # type: ignore[arg-type]
        malformed = ERRORS.labels("worker", "malformed")
        before = malformed._value.get()
        base = ctx.subjects.cancel_wildcard.removesuffix("*")
        for subject, data in (
            (ctx.subjects.cancel(CLIENT), b"\x81\xa4type\xa6gs.v1.cancel"),
            (base + "a%b", encode(CancelRequest(request_id="r1"))),
        ):
            await shim.on_cancel(Msg(ctx.nc, subject=subject, data=data))
        assert malformed._value.get() == before + 2
        assert "c.r1" in shim.book
        valid = encode(CancelRequest(request_id="r1"))
        await shim.on_cancel(Msg(ctx.nc, subject=ctx.subjects.cancel(CLIENT), data=valid))
        assert "c.r1" not in shim.book
        assert malformed._value.get() == before + 2
