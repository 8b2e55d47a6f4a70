"""A worker cut off from the stack keeps its answers and sends, once back, only those the
router did not take back meanwhile.

On a host cut off by a partition the worker's NATS connection may stay up (to the NATS node
on its own side of the cut, which has no route to the clients) while its heartbeat no
longer reaches the store: what it publishes then vanishes without an error. Here the store
is killed so that no heartbeat or PING reaches it, the client is not subscribed while the
worker is out of contact (its replies go nowhere, as into the cut-off node), and the
router's revocation of one finished and one running request is written before the store
comes back.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest
from nats.aio.msg import Msg

from proto.codec import decode_any
from proto.messages import Completion
from proto.subjects import Subjects
from services.worker.backend import OutputBatch
from services.worker.factory import build_backend
from services.worker.publisher import REVOKED_REPLIES_DROPPED
from services.worker.service import WorkerShim
from shared.bus import connect_nats
from shared.config import NatsSettings, Settings
from shared.lifecycle import service_context
from shared.servers import ServerProcess, start_redis
from tests.factories import classified_request, until

pytestmark = pytest.mark.connected


async def test_a_worker_out_of_contact_resends_only_the_answers_not_revoked(
    tmp_path: Path, nats_server: ServerProcess, namespace: str
) -> None:
    """Test that answers finished while the store is out of reach reach a client that subscribes
    only afterwards (they were kept and sent again), except the one the router revoked
    meanwhile (dropped and counted, not recorded as ended); a revoked request still running
    is aborted before it can answer; the one not revoked is recorded as ended."""
    redis = start_redis(tmp_path / "redis")
    subjects = Subjects(namespace)
    settings = Settings(
        namespace=namespace,
        nats={"url": nats_server.url},
        redis={"url": redis.url, "socket_timeout_s": 0.5},
        worker={"backend": "instant", "max_num_seqs": 8, "admission": False},
    )
    completions: list[str] = []

    async def on_reply(msg: Msg) -> None:
        message = decode_any(msg.data)
        if isinstance(message, Completion):
            completions.append(message.request_id)

    dropped_before = REVOKED_REPLIES_DROPPED._value.get()
    try:
        async with service_context("worker", settings) as ctx:
            shim = WorkerShim(ctx, build_backend(ctx.settings))
            resend = asyncio.create_task(shim.resend_loop())
            for rid in ("kept", "revoked", "running"):
                req = classified_request(rid, output_tokens=2, deadline_s=1e12)
                req = msgspec.structs.replace(
                    req,
                    request=msgspec.structs.replace(
                        req.request, reply_subject=subjects.client_reply("c", rid)
                    ),
                )
                assert (await shim.on_dispatch(req, None)).accepted  # type: ignore[arg-type]
            await shim.publish_stats()
            assert shim.contact.in_contact()
            redis.kill()
            await until(lambda: not shim.contact.in_contact())  # neither heartbeat nor PING
            await asyncio.sleep(0.2)  # the outbox has seen the loss
            done = ("kept", "revoked")
            await shim.on_output(
                OutputBatch(emitted=done + done, finished=done, at=time.time())
            )  # published with nobody listening: gone, as into a cut-off NATS node
            redis = redis.restart()
            worker_id = settings.worker.worker_id
            later = f"{time.time() + 0.5:.6f}"
            await ctx.redis.hset(
                ctx.keys.revoked(worker_id), mapping={"revoked": later, "running": later}
            )
            client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
            try:
                await client.subscribe(subjects.client_wildcard("c"), cb=on_reply)
                await client.flush()
                await until(shim.contact.in_contact)  # the probe's PING reaches the store again
                await until(lambda: bool(completions), 10.0)
                await asyncio.sleep(1.0)  # a revoked answer would come with the kept one
            finally:
                await client.close()
                resend.cancel()
            assert "running" not in shim.book  # aborted unanswered
            assert await shim.ended_log.flush()
            ended = ctx.keys.ended(worker_id)
            kept_ended = await ctx.redis.zscore(ended, "kept")
            revoked_ended = await ctx.redis.zscore(ended, "revoked")
    finally:
        redis.stop()
    assert completions == ["kept"]
    assert REVOKED_REPLIES_DROPPED._value.get() - dropped_before == 1
    assert kept_ended is not None
    assert revoked_ended is None
