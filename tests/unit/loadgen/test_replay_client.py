"""The replayer's client side: publish retries and what counts as a second ending."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from loadgen.replay import ClientRecord, publish_with_retry, replay
from loadgen.traces import TraceRequest
from proto.codec import decode, encode
from proto.messages import Completion, Request
from proto.subjects import Subjects

S = Subjects("gs")


class _FlakyJs:
    """Fails the first ``failures`` publishes with ``error``, then acks."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures = failures
        self.error = error
        self.published: list[tuple[str, bytes, dict[str, str]]] = []

    async def publish(
        self, subject: str, payload: bytes, *, headers: dict[str, str], **_: Any
    ) -> None:
        self.published.append((subject, payload, dict(headers)))
        if len(self.published) <= self.failures:
            raise self.error


@pytest.mark.parametrize(
    "error",
    [
        nats.errors.TimeoutError(),
        nats.js.errors.NoStreamResponseError(),
        nats.errors.NoRespondersError(),
    ],
)
def test_an_unacked_publish_is_retried_with_the_same_message(error: BaseException) -> None:
    """Test that timeouts and an absent stream are retried, with the same bytes and id."""
    js = _FlakyJs(2, error)
    record = ClientRecord("r1", TraceRequest(0.0, 8, 8))
    headers = {"Nats-Msg-Id": "c.r1"}
    subject = S.ingress_client("c")
    ok = asyncio.run(publish_with_retry(cast(JetStreamContext, js), subject, b"p", headers, record))
    assert ok
    assert record.publish_attempts == 3
    assert {(s, p, h["Nats-Msg-Id"]) for s, p, h in js.published} == {(subject, b"p", "c.r1")}


def test_a_publish_is_given_up_after_its_budget_and_other_errors_are_raised() -> None:
    """Test the budget (False, the request will count as lost) and a non-retryable error."""
    record = ClientRecord("r1", TraceRequest(0.0, 8, 8))
    js = _FlakyJs(100, nats.errors.TimeoutError())
    ok = asyncio.run(
        publish_with_retry(cast(JetStreamContext, js), "s", b"p", {}, record, budget_s=0.2)
    )
    assert not ok
    assert 2 <= record.publish_attempts < 100
    with pytest.raises(nats.js.errors.BadRequestError):
        asyncio.run(
            publish_with_retry(
                cast(JetStreamContext, _FlakyJs(1, nats.js.errors.BadRequestError())),
                "s",
                b"p",
                {},
                ClientRecord("r2", TraceRequest(0.0, 8, 8)),
            )
        )


class _Msg:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.headers: dict[str, str] | None = None


class _EchoNc:
    """A NATS client whose stream 'runs' each request: the completion arrives ``times``."""

    def __init__(self, endings: Callable[[Completion], list[Completion]]) -> None:
        self._endings = endings
        self._subs: dict[str, Callable[[Any], Awaitable[None]]] = {}
        self.options: dict[str, Any] = {"user": "c"}
        self.connected_url = None
        self.stats = {"reconnects": 0}  # never reconnects: the replay asks for nothing again
        self.is_connected = True

    async def subscribe(self, subject: str, cb: Callable[[Any], Awaitable[None]]) -> Any:
        self._subs[subject] = cb
        return self

    async def unsubscribe(self) -> None:
        return None

    def jetstream(self) -> _EchoNc:
        return self

    async def publish(
        self, subject: str, payload: bytes, *, headers: dict[str, str], **_: Any
    ) -> None:
        req = decode(payload, Request)
        done = Completion(
            request_id=req.request_id,
            worker_id="w",
            pool_id="p",
            region="PJM",
            request_class="SS",
            input_tokens=8,
            output_tokens=0,
            sent_at=req.sent_at,
            accepted_at=req.sent_at,
            first_token_at=req.sent_at,
            finished_at=req.sent_at + 1.0,
            energy_j=1.0,
        )
        for ending in self._endings(done):
            await self._subs[S.client_wildcard("c")](_Msg(encode(ending)))


def _duplicates(endings: Callable[[Completion], list[Completion]]) -> list[int]:
    nc = _EchoNc(endings)
    trace = [TraceRequest(0.0, 8, 1)]
    result = asyncio.run(
        replay(cast(Client, nc), S, trace, model="m", speedup=1.0, settle_timeout_s=0.1)
    )
    assert all(r.completion is not None for r in result.records)
    return [r.duplicate_endings for r in result.records]


def test_the_same_completion_twice_is_one_ending_but_a_different_one_is_a_duplicate() -> None:
    """Test that a re-sent (identical) completion is not a duplicate; a second run is."""
    assert _duplicates(lambda done: [done]) == [0]
    assert _duplicates(lambda done: [done, done]) == [0]
    rerun = lambda done: [done, Completion(**{**_fields(done), "worker_id": "w2"})]  # noqa: E731
    assert _duplicates(rerun) == [1]


def _fields(done: Completion) -> dict[str, Any]:
    return {f: getattr(done, f) for f in done.__struct_fields__}
