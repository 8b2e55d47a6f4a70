"""A dispatch whose reply never came (a NATS restart, a slow worker) on real NATS and Redis:
its request may be running or even done on that worker, so the router reads the worker's
ended record, then sends it to the same worker again, and re-queues it only after that
worker left it unanswered :data:`DISPATCH_RETRIES` more times (``services/router/recovery.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from nats.aio.msg import Msg

from proto.messages import ClassifiedRequest, DispatchReply
from services.router.recovery import DISPATCH_RETRIES
from services.router.service import RouterShell
from shared.bus import serve
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests.factories import classified_request, until, worker_stats
from tests.integration.test_missed_endings import _Link, _settings

pytestmark = pytest.mark.connected

REPLY_TIMEOUT_S = 0.2


class _OneShot(_Link):
    """A scheduler that hands out one request once."""

    def __init__(self, request: ClassifiedRequest) -> None:
        super().__init__()
        self._pending = [request]

    async def pull(self, pool_id: str, slots: int) -> tuple[list[ClassifiedRequest], int]:
        taken, self._pending = self._pending, []
        return taken, 0


async def _never(_n: int) -> bool:
    """A worker that never answers."""
    return False


async def _route_one(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    answer: Callable[[int], Awaitable[bool]],
    *,
    ended_before: bool = False,
    done: Callable[[_Link, list[int]], bool],
) -> tuple[_Link, list[int], RouterShell]:
    """Place request ``r1`` on worker ``w1``, whose dispatch handler waits for ``answer(n)``
    (n: the how-many-th dispatch) and replies only when it returns True."""
    settings = _settings(namespace, nats_server, redis_server)
    settings = settings.model_copy(
        update={
            "nats": settings.nats.model_copy(update={"request_timeout_s": REPLY_TIMEOUT_S}),
            "router": settings.router.model_copy(update={"worker_timeout_s": 60.0}),
        }
    )
    calls: list[int] = []
    async with service_context("router", settings) as ctx:

        async def on_dispatch(req: ClassifiedRequest, _msg: Msg) -> DispatchReply | None:
            calls.append(len(calls) + 1)
            if not await answer(len(calls)):
                return None  # no reply: the router's request times out
            return DispatchReply(
                request_id=req.request.request_id,
                worker_id="w1",
                accepted=True,
                accepted_at=time.time(),
            )

        sub = await serve(
            ctx.nc, ctx.subjects.worker_dispatch("w1"), ClassifiedRequest, on_dispatch, service="t"
        )
        if ended_before:
            await ctx.redis.zadd(ctx.keys.ended("w1"), {"r1": time.time()})
        link = _OneShot(classified_request("r1"))
        shell = RouterShell(ctx, link)
        shell.registry.update(worker_stats("w1", pool_id="p", max_num_seqs=4), time.time())
        shell.mark_ready("p")
        await shell.place_round()
        await until(lambda: done(link, calls))
        await asyncio.sleep(REPLY_TIMEOUT_S)  # nothing more happens after
        await sub.unsubscribe()
        return link, calls, shell


async def test_a_lost_dispatch_reply_sends_it_to_the_same_worker_again(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that the first reply lost, the second dispatch (same worker) is accepted, and
    the request is neither re-queued nor run elsewhere."""

    async def second_only(n: int) -> bool:
        return n >= 2

    link, calls, shell = await _route_one(
        nats_server,
        redis_server,
        namespace,
        second_only,
        done=lambda _link, calls: len(calls) >= 2,
    )
    await until(lambda: shell.registry.confirmed_before(time.time() + 1.0) == [("r1", "w1")])
    assert calls == [1, 2]
    assert link.requeued == []


async def test_an_unanswered_dispatch_the_worker_had_ended_is_forgotten(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a request its worker's record names as ended is neither sent again nor
    re-queued (it ran, and its client has the answer)."""

    link, calls, _shell = await _route_one(
        nats_server,
        redis_server,
        namespace,
        _never,
        ended_before=True,
        done=lambda link, _calls: bool(link.unheard),
    )
    assert calls == [1]
    assert link.unheard == ["r1"]
    assert link.requeued == []


async def test_a_worker_that_never_answers_gets_its_request_requeued_after_the_retries(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that after 1 + DISPATCH_RETRIES unanswered dispatches the request goes back to
    the queue once, and the worker's slot is free again."""

    link, calls, shell = await _route_one(
        nats_server,
        redis_server,
        namespace,
        _never,
        done=lambda link, _calls: bool(link.requeued),
    )
    assert len(calls) == 1 + DISPATCH_RETRIES
    assert link.requeued == ["r1"]
    assert shell.registry.loads("p", 0.0)[0].free_slots == 4
