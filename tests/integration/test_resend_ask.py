"""A reconnected client asks for the endings it may have missed; workers send them again.

A client whose NATS node is killed moves to another, and what was published to it meanwhile
is gone (core NATS). Here the client subscribes only after the request finished (its reply
went nowhere, as to a client between two nodes) and then asks on its own resend subject.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest
from nats.aio.msg import Msg

from proto.codec import decode_any
from proto.messages import Completion
from proto.subjects import Subjects
from services.worker.backend import OutputBatch
from services.worker.factory import build_backend
from services.worker.service import WorkerShim
from shared.bus import connect_nats
from shared.config import NatsSettings, Settings
from shared.lifecycle import service_context
from shared.resends import ask_resend
from shared.servers import ServerProcess
from tests.factories import classified_request

pytestmark = pytest.mark.connected


async def test_a_client_that_asks_again_gets_its_missed_ending_and_no_other_client_does(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a completion published while its client was not subscribed reaches it
    once it asks for it on its own resend subject, and that another client asking for the
    same own id gets nothing (the id is scoped with the asking subject's client)."""
    subjects = Subjects(namespace)
    settings = Settings(
        namespace=namespace,
        nats={"url": nats_server.url},
        redis={"url": redis_server.url},
        worker={"backend": "instant", "max_num_seqs": 4, "admission": False},
    )
    got: list[tuple[str, str]] = []
    arrived = asyncio.Event()

    async def on_reply(msg: Msg) -> None:
        message = decode_any(msg.data)
        if isinstance(message, Completion):
            got.append((msg.subject, message.request_id))
            arrived.set()

    async with service_context("worker", settings) as ctx:
        shim = WorkerShim(ctx, build_backend(ctx.settings))
        await ctx.nc.subscribe(subjects.resend_wildcard, cb=shim.on_resend)
        req = classified_request("c.r1", output_tokens=1, deadline_s=1e12)
        reply = subjects.client_reply("c", "r1")
        req = msgspec.structs.replace(
            req, request=msgspec.structs.replace(req.request, reply_subject=reply)
        )
        assert (await shim.on_dispatch(req, None)).accepted  # type: ignore[arg-type]
        await shim.on_output(OutputBatch(emitted=("c.r1",), finished=("c.r1",), at=time.time()))
        client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
        try:
            await client.subscribe(subjects.client_wildcard("c"), cb=on_reply)
            await client.subscribe(subjects.client_wildcard("d"), cb=on_reply)
            await client.flush()
            await asyncio.sleep(0.3)
            assert got == []  # published before anyone listened: missed
            assert await ask_resend(client, subjects, "d", ["r1"]) == 1
            await asyncio.sleep(0.5)
            assert got == []  # another client's ask names d.r1, which never ran
            assert await ask_resend(client, subjects, "c", ["r1", "never-sent"]) == 2
            await asyncio.wait_for(arrived.wait(), 10.0)
            await asyncio.sleep(0.3)  # a second copy would come with the first
        finally:
            await client.close()
    assert got == [(reply, "r1")]
