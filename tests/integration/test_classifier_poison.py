"""One request the classifier cannot size must not hold back the rest of its ingress batch.

The classifier hands a whole batch of ingress messages to the scheduler at once and acks
after; an exception while classifying one message used to fail the whole batch, so every
request in it waited for JetStream's redelivery (``ack_wait``) and came back with the same
message, until ``max_deliver`` dropped them, unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from nats.aio.msg import Msg

from proto.codec import decode_any, encode
from proto.messages import ClassifiedRequest, ErrorReply, Request, SubmitBatchReply
from proto.subjects import Subjects
from services.classifier.service import build_core, consume
from services.planner.service import static_plan
from shared.bus import connect_nats, ensure_ingress_stream
from shared.config import NatsSettings, Settings
from shared.lifecycle import service_context
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected


async def test_a_request_the_predictor_cannot_size_is_refused_alone(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test, with the trace-replay ``oracle`` predictor, that a request without a known
    output length (``ignore_eos`` false) gets an error reply at once while the request
    beside it in the batch is handed off within the first delivery."""
    subjects = Subjects(namespace)
    settings = Settings(
        namespace=namespace,
        nats={"url": nats_server.url},
        redis={"url": redis_server.url},
        classifier={"predictor": "oracle"},
    )
    submitted: list[str] = []
    errors: dict[str, ErrorReply] = {}
    both = asyncio.Event()

    async def submit(requests: list[ClassifiedRequest]) -> SubmitBatchReply:
        ids = [r.request.request_id for r in requests]
        submitted.extend(ids)
        if errors:
            both.set()
        return SubmitBatchReply(accepted=ids)

    async def on_reply(msg: Msg) -> None:
        message = decode_any(msg.data)
        if isinstance(message, ErrorReply) and message.request_id:
            errors[message.request_id] = message
            if submitted:
                both.set()

    def request(rid: str, *, ignore_eos: bool) -> Request:
        return Request(
            request_id=rid,
            model="llama-3-8b",
            reply_subject=subjects.client_reply("c", rid),
            sent_at=time.time(),
            max_tokens=8,
            prompt_tokens=16,
            ignore_eos=ignore_eos,
        )

    client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
    try:
        await client.subscribe(subjects.client_wildcard("c"), cb=on_reply)
        async with service_context("classifier", settings) as ctx:
            await ensure_ingress_stream(ctx.js, subjects)
            js = client.jetstream()
            # Both wait in the stream, so the classifier takes them in one batch.
            await js.publish(subjects.ingress_request, encode(request("open", ignore_eos=False)))
            await js.publish(subjects.ingress_request, encode(request("good", ignore_eos=True)))
            core = build_core(ctx)
            core.update_plan(static_plan(ctx.settings.planner, 0, time.time(), 60.0))
            consuming = asyncio.create_task(consume(ctx, core, submit, ctx.tracer))
            try:
                # Well inside ack_wait (5 s): no redelivery can have helped.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(both.wait(), 3.0)
            finally:
                ctx.stop.set()
                await asyncio.wait_for(consuming, 10.0)
    finally:
        await client.close()
    assert submitted == ["good"]
    assert set(errors) == {"open"}
    assert errors["open"].code == "unclassifiable"
