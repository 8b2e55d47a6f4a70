"""A NATS outage loses core messages (dispatch replies, completions, request.done): the
request path must neither run a request twice nor leave it unanswered (``restart:nats``).

A dispatch whose reply was lost comes back to the worker (the router's retry) or to the
scheduler (the router's requeue after its timeout) although the request already ran.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, stack_launches
from proto.codec import decode_any
from proto.messages import ClassifiedRequest, Completion, DispatchReply
from proto.subjects import Subjects
from services.scheduler.service import SchedulerShell
from shared.bus import connect_nats, request
from shared.config import NatsSettings
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests.factories import classified_request, connected_settings, no_ready

pytestmark = pytest.mark.connected


async def test_a_late_requeue_of_an_ended_request_is_dropped(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that the scheduler does not queue again a request whose end it has heard."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("scheduler", settings) as ctx:
        scheduler = SchedulerShell(ctx, on_ready=no_ready)
        ran, other = classified_request("c.ran"), classified_request("c.other")
        await scheduler.submit([ran, other])
        pulled, _ = await scheduler.pull("p", 2)
        assert len(pulled) == 2
        scheduler.ended("c.ran")  # its completion arrived while the dispatch reply was lost
        await scheduler.forget_ended()
        await scheduler.requeue(pulled)  # the router's timeout hands both back
        assert [r.request.request_id for r in (await scheduler.pull("p", 5))[0]] == ["c.other"]
        assert not await ctx.redis.hexists(ctx.keys.queued, "c.ran")


async def test_a_finished_request_dispatched_again_is_answered_without_a_second_run(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test the worker: the repeat is accepted and ends with the same completion again."""
    subjects = Subjects(namespace)
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=1,
        regions=("PJM",),
        speedup=20.0,
        origin_wall_s=time.time(),
    )
    worker = next(launch for launch in stack_launches(spec) if launch.name == "worker-0")
    reply_subject = subjects.client_reply("c", "r1")
    base = classified_request("c.r1", pool_id=worker.settings.worker.pool_id)
    req = msgspec.structs.replace(
        base,
        request=msgspec.structs.replace(base.request, reply_subject=reply_subject, client_id="c"),
        deadline_s=1e12,
    )
    to_client: asyncio.Queue[Completion] = asyncio.Queue()
    done: asyncio.Queue[Completion] = asyncio.Queue()

    async def on_client(msg: Msg) -> None:
        message = decode_any(msg.data)
        if isinstance(message, Completion):
            await to_client.put(message)

    async def on_done(msg: Msg) -> None:
        message = decode_any(msg.data)
        if isinstance(message, Completion):
            await done.put(message)

    nc = await connect_nats(NatsSettings(url=nats_server.url), "test-router")
    try:
        await nc.subscribe(reply_subject, cb=on_client)
        await nc.subscribe(subjects.request_done_wildcard, cb=on_done)
        async with run_in_process([worker]):
            first = await _dispatch(nc, subjects.worker_dispatch("worker-0"), req)
            assert first.accepted
            completion = await asyncio.wait_for(to_client.get(), 10.0)
            first_done = await asyncio.wait_for(done.get(), 5.0)
            again = await _dispatch(nc, subjects.worker_dispatch("worker-0"), req)
            assert again.accepted
            repeated = await asyncio.wait_for(to_client.get(), 5.0)
            repeated_done = await asyncio.wait_for(done.get(), 5.0)
            await asyncio.sleep(0.5)  # a second run would stream and complete again by now
    finally:
        await nc.close()
    assert completion.request_id == "r1"  # the client's own id
    assert first_done.request_id == "c.r1"  # the stack's
    assert repeated == completion  # the same completion, not a second run
    assert repeated_done == first_done
    assert to_client.empty()
    assert done.empty()


async def _dispatch(nc: Client, subject: str, req: ClassifiedRequest) -> DispatchReply:
    """Dispatch until the worker (starting up) answers; at most 10 s."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            return await request(nc, subject, req, DispatchReply, 1.0)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
