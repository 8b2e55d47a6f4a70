"""Request ids are scoped per client: equal ids of two clients are two requests, and a
client reusing its own id is told so (docs/protocol.md, docs/security.md).

The classifier binds each request to its ingress subject ``ingress.client.<client id>`` and
the stack carries it as ``<client id>.<request id>``; the scheduler's seen-mark keeps the
ingress message's stream sequence, so a redelivery (same message) stays a silent duplicate
while a new message under a used id is answered ``duplicate_request_id``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, stack_launches
from proto.codec import decode_any, encode
from proto.messages import Completion, ErrorReply, Request, TokenChunk, scoped_request_id
from proto.subjects import Subjects
from services.classifier.ingress_identity import DUPLICATE_REQUEST_ID
from services.scheduler.service import SchedulerShell
from shared.bus import connect_nats, ensure_ingress_stream
from shared.config import NatsSettings
from shared.counters import ERRORS
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests.factories import classified_request, connected_settings, no_ready

pytestmark = pytest.mark.connected


async def test_the_seen_mark_tells_a_redelivery_from_a_reused_id(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test submit: same ingress message or same request = duplicate; another = reused."""
    settings = connected_settings(namespace, nats_server, redis_server)
    async with service_context("scheduler", settings) as ctx:
        scheduler = SchedulerShell(ctx, on_ready=no_ready)
        first = classified_request("a.r1", ingress_seq=7)
        assert (await scheduler.submit([first])).accepted == ["a.r1"]
        redelivered = await scheduler.submit([first])
        assert (redelivered.accepted, redelivered.duplicates, redelivered.reused) == (
            [],
            ["a.r1"],
            [],
        )
        # A new message (sequence 9) under the same id, with another payload: refused, and
        # the stored request is still the first one.
        other = classified_request("a.r1", ingress_seq=9, output_tokens=50)
        reused = await scheduler.submit([other])
        assert (reused.accepted, reused.duplicates, reused.reused) == ([], [], [9])
        stored = await ctx.redis.hget(ctx.keys.queued, "a.r1")
        assert stored == encode(first)
        # Another client's equal id is a request of its own.
        assert (await scheduler.submit([classified_request("b.r1", ingress_seq=9)])).accepted == [
            "b.r1"
        ]
        # Both in one batch: the first is stored, the second is the reuse.
        pair = [
            classified_request("a.r2", ingress_seq=11),
            classified_request("a.r2", ingress_seq=12, output_tokens=9),
        ]
        both = await scheduler.submit(pair)
        assert (both.accepted, both.reused) == (["a.r2"], [12])
        # The same request published again (a retried publish the stream stored twice):
        # another sequence but the same request, so a silent duplicate, not a reuse.
        again = await scheduler.submit([classified_request("a.r1", ingress_seq=13)])
        assert (again.accepted, again.duplicates, again.reused) == ([], ["a.r1"], [])
        # Without a sequence (an older classifier) nothing can be told apart: a duplicate.
        legacy = await scheduler.submit([classified_request("a.r1")])
        assert (legacy.duplicates, legacy.reused) == (["a.r1"], [])


class _Client:
    """One client on its own bound ingress subject, recording what reaches it."""

    def __init__(self, nc: Client, subjects: Subjects, client_id: str) -> None:
        self.nc = nc
        self.subjects = subjects
        self.client_id = client_id
        self.endings: dict[str, list[Completion | ErrorReply]] = {}
        self.tokens: dict[str, int] = {}
        self._ended = asyncio.Event()

    async def start(self) -> None:
        await self.nc.subscribe(self.subjects.client_wildcard(self.client_id), cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        message: Any = decode_any(msg.data)
        if isinstance(message, TokenChunk):
            self.tokens[message.request_id] = self.tokens.get(message.request_id, 0) + len(
                message.token_times
            )
        elif isinstance(message, Completion | ErrorReply):
            self.endings.setdefault(message.request_id or "", []).append(message)
            self._ended.set()

    async def send(self, request_id: str, max_tokens: int, msg_id: str) -> None:
        request = Request(
            request_id=request_id,
            model="llama-3-8b",
            reply_subject=self.subjects.client_reply(self.client_id, request_id),
            sent_at=time.time(),
            max_tokens=max_tokens,
            prompt_tokens=16,
        )
        await self.nc.jetstream().publish(
            self.subjects.ingress_client(self.client_id),
            encode(request),
            headers={"Nats-Msg-Id": msg_id},
        )

    async def wait_for(self, count: int, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while sum(len(v) for v in self.endings.values()) < count:
            self._ended.clear()
            await asyncio.wait_for(self._ended.wait(), max(0.01, deadline - time.monotonic()))


@pytest.mark.parametrize("colocate", [True, False], ids=["colocated", "separate"])
async def test_equal_ids_of_two_clients_run_twice_and_a_reuse_is_refused(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str, colocate: bool
) -> None:
    """Test client ids scoping request ids end to end.

    client-a and client-b both send request id ``same``: both run (3 and 5 tokens), and each
    reply carries ``same``. Then client-a sends ``same`` again as a new message (another
    ``Nats-Msg-Id``): it is answered ``duplicate_request_id`` (counted, not run), and the
    first ``same`` of client-a still ended exactly once.
    """
    subjects = Subjects(namespace)
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=1,
        regions=("PJM",),
        speedup=20.0,
        origin_wall_s=time.time(),
        colocate_request_path=colocate,
    )
    reused = ERRORS.labels("classifier", DUPLICATE_REQUEST_ID)
    before = reused._value.get()
    nc = await connect_nats(NatsSettings(url=nats_server.url), "test-clients")
    a, b = _Client(nc, subjects, "client-a"), _Client(nc, subjects, "client-b")
    try:
        await ensure_ingress_stream(nc.jetstream(), subjects)
        await a.start()
        await b.start()
        async with run_in_process(stack_launches(spec)):
            # Clients scope their Nats-Msg-Id too: the stream's de-dup spans all clients.
            await a.send("same", 3, scoped_request_id("client-a", "same"))
            await b.send("same", 5, scoped_request_id("client-b", "same"))
            await a.wait_for(1)
            await b.wait_for(1)
            await a.send("same", 7, "client-a.same.again")
            await a.wait_for(2)
            await asyncio.sleep(1.0)  # a wrongly run reuse would complete by now
    finally:
        await nc.close()
    first_a, reuse_a = a.endings["same"]
    assert isinstance(first_a, Completion)
    assert (first_a.request_id, first_a.output_tokens) == ("same", 3)
    assert isinstance(reuse_a, ErrorReply)
    assert (reuse_a.code, reuse_a.request_id, reuse_a.service) == (
        DUPLICATE_REQUEST_ID,
        "same",
        "classifier",
    )
    assert a.tokens == {"same": 3}  # the reuse produced no tokens
    [only_b] = b.endings["same"]
    assert isinstance(only_b, Completion)
    assert (only_b.request_id, only_b.output_tokens) == ("same", 5)
    assert b.tokens == {"same": 5}
    assert reused._value.get() == before + 1
