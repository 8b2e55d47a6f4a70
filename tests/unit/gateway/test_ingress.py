"""The cancel the gateway sends when an ingress publish fails (``services/gateway/ingress.py``).

A publish whose acknowledgement was lost may have stored the request: the gateway cancels
it before answering 503, and counts that cancel in ``greenserve_gateway_cancels_total``
like its other cancels (docs/protocol.md, Cancellation).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from proto.codec import decode
from proto.messages import CancelRequest
from proto.subjects import Subjects
from services.gateway.cells import CellPicker
from services.gateway.errors import ApiError
from services.gateway.flight import CANCELS_SENT
from services.gateway.ingress import publish
from services.gateway.openai_schema import ParsedRequest, parse_body
from services.gateway.state import GatewayState
from shared.config import GatewaySettings

CELL = "tcell"
PUBLISH_FAILED = "publish_failed"
CLIENT_DISCONNECTED = "client_disconnected"
"""The ``why`` label values, as dashboards and docs/observability.md spell them."""


class _FakeNc:
    """Records core publishes (the cancel goes here)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes]] = []

    async def publish(self, subject: str, payload: bytes) -> None:
        self.published.append((subject, payload))


class _FailingJs:
    """A JetStream context whose every publish raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self._error = error

    async def publish(self, *_args: Any, **_kwargs: Any) -> None:
        raise self._error


def _state(nc: _FakeNc, error: BaseException) -> GatewayState:
    return GatewayState(
        nc=cast(Client, nc),
        js=cast(JetStreamContext, _FailingJs(error)),
        subjects=Subjects(CELL),
        config=GatewaySettings(),
        models=frozenset({"llama-3-8b"}),
        client_id="c",
        chars_per_token=4.0,
        context_tokens=None,
        cells=CellPicker([CELL]),
    )


def _parsed() -> ParsedRequest:
    return parse_body(
        json.dumps({"model": "llama-3-8b", "prompt": "x", "max_tokens": 3}).encode(),
        "completion",
        models=frozenset({"llama-3-8b"}),
        default_max_tokens=16,
        chat_default_max_tokens=1024,
        max_tokens_limit=1 << 20,
    )


def _sent(why: str) -> float:
    value: float = CANCELS_SENT.labels(why)._value.get()
    return value


def _cancelled_ids(nc: _FakeNc) -> list[str]:
    subject = Subjects(CELL).cancel("c")
    return [decode(data, CancelRequest).request_id for s, data in nc.published if s == subject]


async def test_a_failed_ingress_publish_is_cancelled_counted_and_answered_unavailable() -> None:
    """Test that a publish timing out (it may have been stored) sends one cancel to the
    cell, counts it under ``publish_failed``, releases the cell and answers 503."""
    nc = _FakeNc()
    state = _state(nc, TimeoutError())
    before = _sent(PUBLISH_FAILED)
    with pytest.raises(ApiError) as info:
        await publish(state, _parsed(), "r1")
    assert info.value.code == "unavailable"
    assert _cancelled_ids(nc) == ["r1"]
    assert _sent(PUBLISH_FAILED) == before + 1
    assert [c.in_flight for c in state.cells.cells] == [0]


async def test_a_handler_cancelled_mid_publish_counts_its_cancel_as_a_disconnect() -> None:
    """Test that a client leaving while its request is being published (the handler is
    cancelled) still cancels the request, counted as ``client disconnected``."""
    nc = _FakeNc()
    state = _state(nc, asyncio.CancelledError())
    before = (_sent(CLIENT_DISCONNECTED), _sent(PUBLISH_FAILED))
    with pytest.raises(asyncio.CancelledError):
        await publish(state, _parsed(), "r2")
    assert _cancelled_ids(nc) == ["r2"]
    assert (_sent(CLIENT_DISCONNECTED), _sent(PUBLISH_FAILED)) == (before[0] + 1, before[1])
