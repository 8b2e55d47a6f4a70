"""A worker keeps serving, and loses no work, when NATS or Redis goes away under it.

While nats-server restarts, nats-py buffers what the worker publishes, but only up to its
pending limit (2 MiB); beyond it ``publish`` raises ``OutboundBufferLimitError``. A worker
streaming tokens to many clients fills that in seconds, and an exception there used to end
the engine loop, and with it the worker's task group and process. At SIGTERM the drain must
hand unfinished requests back to the scheduler even when Redis is down.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest
from nats.aio.msg import Msg

from proto.codec import decode, decode_any, encode
from proto.messages import Completion, ErrorReply, RequeueRequest, SubmitReply
from proto.subjects import Subjects
from services.worker.backend import OutputBatch
from services.worker.factory import build_backend
from services.worker.service import WorkerShim
from shared.bus import connect_nats
from shared.config import NatsSettings, Settings
from shared.lifecycle import service_context
from shared.servers import ServerProcess, start_nats, start_redis
from tests.factories import classified_request

pytestmark = pytest.mark.connected

REQUESTS = 40
TOKENS = 8000
"""40 requests x 8,000 token times (9 bytes each) ≈ 2.9 MB of chunks: over nats-py's 2 MiB."""


def _settings(namespace: str, nats_url: str, redis_url: str, backend: str = "instant") -> Settings:
    return Settings(
        namespace=namespace,
        nats={"url": nats_url, "reconnect_wait_s": 0.1},
        redis={"url": redis_url, "socket_timeout_s": 0.5},
        worker={"backend": backend, "max_num_seqs": REQUESTS + 1, "admission": False},
    )


async def _wait_for(condition: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def test_a_nats_outage_with_a_full_publish_buffer_neither_ends_the_worker_nor_its_replies(
    tmp_path: Path, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that output published while NATS is down and the client's buffer is full raises
    nothing into the engine loop, and reaches the client after the reconnect; so does the
    error of a request that failed meanwhile."""
    nats = start_nats(tmp_path / "nats")
    subjects = Subjects(namespace)
    settings = _settings(namespace, nats.url, redis_server.url)
    completions: set[str] = set()
    errors: set[str] = set()

    async def on_reply(msg: Msg) -> None:
        message = decode_any(msg.data)
        if isinstance(message, Completion):
            completions.add(message.request_id)
        elif isinstance(message, ErrorReply) and message.request_id:
            errors.add(message.request_id)

    try:
        async with service_context("worker", settings) as ctx:
            shim = WorkerShim(ctx, build_backend(ctx.settings))
            resend = asyncio.create_task(shim.resend_loop())
            ids = [f"r{i}" for i in range(REQUESTS)]
            for rid in [*ids, "failed"]:
                req = classified_request(rid, output_tokens=TOKENS, deadline_s=1e12)
                req = msgspec.structs.replace(
                    req,
                    request=msgspec.structs.replace(
                        req.request, reply_subject=subjects.client_reply("c", rid)
                    ),
                )
                assert (await shim.on_dispatch(req, None)).accepted  # type: ignore[arg-type]
            nats.kill()
            await _wait_for(lambda: not ctx.nc.is_connected)
            await asyncio.sleep(0.2)  # the outbox has seen the outage
            now = time.time()
            batch = OutputBatch(
                emitted=tuple(rid for rid in ids for _ in range(TOKENS)),
                finished=tuple(ids),
                at=now,
            )
            await shim.on_output(batch)  # raised OutboundBufferLimitError before the fix
            await shim.on_failure("failed", "engine_error", "the engine went away")
            assert not len(shim.book)
            nats = start_nats(tmp_path / "nats", nats.port)
            client = await connect_nats(NatsSettings(url=nats.url), "test-client")
            try:
                await client.subscribe(subjects.client_wildcard("c"), cb=on_reply)
                await client.flush()
                await _wait_for(lambda: completions == set(ids) and errors == {"failed"}, 15.0)
            finally:
                await client.close()
                resend.cancel()
    finally:
        nats.stop()


async def test_a_backend_refusal_lost_to_a_nats_outage_is_sent_again_and_recorded_as_ended(
    tmp_path: Path, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a request the backend refuses while NATS is down (``kv_capacity``: it can
    never fit the KV cache) has its error re-sent after the reconnect, like the other
    final errors, and is in the worker's ended log. Sent around the outbox, it was flushed
    from nats-py's reconnect buffer before the client had resubscribed, and lost."""
    nats = start_nats(tmp_path / "nats")
    subjects = Subjects(namespace)
    settings = _settings(namespace, nats.url, redis_server.url, backend="sim")
    errors: list[ErrorReply] = []

    async def on_reply(msg: Msg) -> None:
        message = decode_any(msg.data)
        if isinstance(message, ErrorReply):
            errors.append(message)

    try:
        async with service_context("worker", settings) as ctx:
            shim = WorkerShim(ctx, build_backend(ctx.settings))
            resend = asyncio.create_task(shim.resend_loop())
            nats.kill()
            await _wait_for(lambda: not ctx.nc.is_connected)
            await asyncio.sleep(0.2)  # the outbox has seen the outage
            huge = classified_request("huge", prompt_tokens=10_000_000, deadline_s=1e12)
            huge = msgspec.structs.replace(
                huge,
                request=msgspec.structs.replace(
                    huge.request, reply_subject=subjects.client_reply("c", "huge")
                ),
            )
            assert (await shim.on_dispatch(huge, None)).accepted  # type: ignore[arg-type]
            assert not len(shim.book)
            nats = start_nats(tmp_path / "nats", nats.port)
            # Subscribe only once the worker is back and has flushed its reconnect buffer:
            # what reaches this client then is the outbox's re-send (1.5 s after).
            await _wait_for(lambda: ctx.nc.is_connected)
            await asyncio.sleep(0.3)
            client = await connect_nats(NatsSettings(url=nats.url), "test-client")
            try:
                await client.subscribe(subjects.client_wildcard("c"), cb=on_reply)
                await client.flush()
                await _wait_for(lambda: bool(errors), 10.0)
            finally:
                await client.close()
                resend.cancel()
            assert await shim.ended_log.flush()
            ended = await ctx.redis.zscore(ctx.keys.ended(settings.worker.worker_id), "huge")
    finally:
        nats.stop()
    assert [(e.code, e.request_id) for e in errors] == [("kv_capacity", "huge")]
    assert ended is not None  # no adopting router dispatches it again


async def test_a_drain_while_redis_is_down_still_hands_unfinished_requests_back(
    tmp_path: Path, nats_server: ServerProcess, namespace: str
) -> None:
    """Test that SIGTERM's drain re-queues what did not finish although Redis is down."""
    redis = start_redis(tmp_path / "redis")
    subjects = Subjects(namespace)
    settings = _settings(namespace, nats_server.url, redis.url)
    requeued: list[RequeueRequest] = []

    async def on_requeue(msg: Msg) -> None:
        requeued.append(decode(msg.data, RequeueRequest))
        await msg.respond(encode(SubmitReply(request_id="x", accepted=True)))

    try:
        async with service_context("worker", settings) as ctx:
            await ctx.nc.subscribe(subjects.scheduler_requeue, cb=on_requeue)
            shim = WorkerShim(ctx, build_backend(ctx.settings))  # never run: nothing finishes
            req = classified_request("r1", deadline_s=1e12)
            assert (await shim.on_dispatch(req, None)).accepted  # type: ignore[arg-type]
            redis.kill()
            await shim.drain(timeout_s=0.2)  # raised ConnectionError before the fix
            await _wait_for(lambda: bool(requeued), 5.0)
            assert [r.request.request_id for r in requeued[0].requests] == ["r1"]
            assert not len(shim.book)
    finally:
        redis.stop()
