"""Bad input at the ingress gets a clear error reply and a counter; nothing crashes or is lost."""

from __future__ import annotations

import asyncio
import time

import nats.errors
import pytest
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, stack_launches
from proto.codec import decode_any, encode
from proto.messages import Completion, ErrorReply, Request
from proto.subjects import Subjects
from services.classifier.service import REPLY_HEADER
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.counters import ERRORS
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected


def _request(subjects: Subjects, rid: str, **fields: object) -> Request:
    base: dict[str, object] = {
        "request_id": rid,
        "model": "llama-3-8b",
        "reply_subject": subjects.client_reply("bad", rid),
        "sent_at": time.time(),
        "max_tokens": 8,
        "prompt_tokens": 16,
    }
    base.update(fields)
    return Request(**base)  # type: ignore[arg-type]


async def test_malformed_and_invalid_requests_get_error_replies_and_good_ones_still_complete(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that garbage, wrong types, unknown models and oversized prompts get error replies."""
    subjects = Subjects(namespace)
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=1,
        regions=("PJM",),
        speedup=50.0,
        origin_wall_s=time.time(),
    )
    replies: dict[str, list[object]] = {}
    got = asyncio.Event()

    async def on_reply(msg: Msg) -> None:
        rid = msg.subject.rsplit(".", 1)[-1]
        replies.setdefault(rid, []).append(decode_any(msg.data))
        got.set()

    malformed_before = ERRORS.labels("classifier", "malformed")._value.get()
    nc = await connect_nats(NatsSettings(url=nats_server.url), "bad-client")
    js = nc.jetstream()
    try:
        await nc.subscribe(subjects.client_wildcard("bad"), cb=on_reply)
        async with run_in_process(stack_launches(spec)):
            # The classifier creates the ingress stream as it starts; on a loaded machine
            # that can come after the stack reports ready, and a publish before it has no
            # stream to store it (no responders).
            await _stream_ready(js, subjects.ingress_request)
            garbage = {
                "garbage": b"\xc1\xff\x00",
                "wrongtype": encode(_request(subjects, "x"))[:-3] + b"\xa3abc",
            }
            for rid, payload in garbage.items():
                await js.publish(
                    subjects.ingress_request,
                    payload,
                    headers={REPLY_HEADER: subjects.client_reply("bad", rid)},
                )
            cases = {
                "unknown": _request(subjects, "unknown", model="gpt-99"),
                "huge": _request(subjects, "huge", prompt_tokens=1_000_000),
                "notext": _request(subjects, "notext", prompt_tokens=None),
                "good": _request(subjects, "good"),
                # A client clock far ahead must not lose the request (it once did: the
                # model-time arrival overflowed its bound and the batch bounced forever).
                "future": _request(subjects, "future", sent_at=2.6e17),
            }
            for req in cases.values():
                await js.publish(subjects.ingress_request, encode(req))
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                ended = {
                    rid
                    for rid, msgs in replies.items()
                    if any(isinstance(m, ErrorReply | Completion) for m in msgs)
                }
                if ended >= {"garbage", "wrongtype", "unknown", "huge", "notext", "good", "future"}:
                    break
                got.clear()
                await asyncio.wait_for(got.wait(), 5)
    finally:
        await nc.close()

    def ending(rid: str) -> object:
        return next(m for m in replies[rid] if isinstance(m, ErrorReply | Completion))

    codes = {
        rid: getattr(ending(rid), "code", None)
        for rid in ("garbage", "wrongtype", "unknown", "huge", "notext")
    }
    assert codes == {
        "garbage": "malformed",
        "wrongtype": "malformed",
        "unknown": "unknown_model",
        "huge": "too_long",
        "notext": "missing_prompt",
    }
    assert isinstance(ending("good"), Completion)
    assert isinstance(ending("future"), Completion)
    assert ERRORS.labels("classifier", "malformed")._value.get() >= malformed_before + 2


async def _stream_ready(js: JetStreamContext, subject: str, timeout_s: float = 30.0) -> None:
    """Wait until a JetStream stream captures ``subject``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await js.find_stream_name_by_subject(subject)
        except nats.errors.Error:
            assert time.monotonic() < deadline, f"no stream captures {subject}"
            await asyncio.sleep(0.1)
        else:
            return
