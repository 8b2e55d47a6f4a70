"""The gateway under bad bytes, wrong keys, overload and idle or slow clients (issue 29).

Each test runs the real gateway (:func:`services.gateway.service.open_gateway`) on the
suite's NATS and Redis, with no services behind it: every answer checked here is the
gateway's own, decided before a request would reach the stack.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from nats.aio.msg import Msg

from proto.subjects import Subjects
from services.gateway.service import Gateway, open_gateway
from shared.bus import connect_nats
from shared.config import GatewaySettings, NatsSettings
from shared.counters import ERRORS
from shared.security.api_keys import hash_api_key
from shared.servers import ServerProcess
from tests.factories import connected_settings

pytestmark = pytest.mark.connected

BODY = b'{"model": "llama-3-8b", "prompt": "hi", "max_tokens": 2, "prompt_tokens": 4}'
"""A valid completion body."""
UNKNOWN_MODEL = b'{"model": "no-such-model", "prompt": "hi"}'
"""A body the gateway refuses with 404 only after decoding and reading it."""


def _errors(code: str) -> float:
    count: float = ERRORS.labels("gateway", code)._value.get()
    return count


async def _post(
    gateway: Gateway, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], Any]:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.post(
            f"{gateway.url}/v1/completions",
            data=body,
            headers={"Content-Type": "application/json", **(headers or {})},
            timeout=aiohttp.ClientTimeout(total=5.0),
        ) as response,
    ):
        return response.status, dict(response.headers), await response.json()


async def _get(gateway: Gateway, path: str, key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{gateway.url}{path}", headers=headers) as response,
    ):
        body = await response.read()
        return response.status, body


def _gateway(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str, **config: Any
) -> Any:
    settings = connected_settings(namespace, nats_server, redis_server)
    return open_gateway(settings, GatewaySettings(port=0, max_body_bytes=64 * 1024, **config))


@pytest.fixture
async def gateway(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> AsyncIterator[Gateway]:
    async with _gateway(nats_server, redis_server, namespace) as started:
        yield started


async def test_invalid_utf8_inside_a_json_string_is_a_counted_400(gateway: Gateway) -> None:
    """Test that bytes that are not UTF-8 inside a JSON string get 400 ``invalid_json``."""
    before = _errors("invalid_json")
    status, _headers, body = await _post(gateway, b'{"model": "llama-3-8b", "prompt": "\xff\xfe"}')
    assert status == 400
    assert body["error"]["code"] == "invalid_json"
    assert body["error"]["type"] == "invalid_request_error"
    assert "UTF-8" in body["error"]["message"]
    assert _errors("invalid_json") == before + 1


async def test_a_gzip_header_over_bytes_that_are_not_gzip_is_a_counted_400(
    gateway: Gateway,
) -> None:
    """Test that ``Content-Encoding: gzip`` over plain JSON gets 400 ``invalid_encoding``,
    and that a truncated gzip body does too."""
    before = _errors("invalid_encoding")
    for raw in (BODY, gzip.compress(BODY)[:-12]):
        status, _headers, body = await _post(gateway, raw, {"Content-Encoding": "gzip"})
        assert status == 400
        assert body["error"]["code"] == "invalid_encoding"
        assert body["error"]["type"] == "invalid_request_error"
    assert _errors("invalid_encoding") == before + 2


async def test_unsupported_encodings_are_400_and_gzip_is_decoded_within_the_limit(
    gateway: Gateway,
) -> None:
    """Test that ``br``, ``zstd`` and stacked codings get 400 ``unsupported_encoding``, a
    real gzip body is decoded (it then fails on its model, which the gateway read), and a
    small gzip body that inflates past ``max_body_bytes`` (a bomb) gets 413."""
    before = _errors("unsupported_encoding")
    for coding in ("br", "zstd", "gzip, gzip", "bogus"):
        status, _headers, body = await _post(gateway, BODY, {"Content-Encoding": coding})
        assert (status, body["error"]["code"]) == (400, "unsupported_encoding"), coding
    assert _errors("unsupported_encoding") == before + 4
    status, _headers, body = await _post(
        gateway, gzip.compress(UNKNOWN_MODEL), {"Content-Encoding": "gzip"}
    )
    assert (status, body["error"]["code"]) == (404, "model_not_found")
    bomb = gzip.compress(b'{"model": "' + b"a" * (8 << 20) + b'"}')
    assert len(bomb) < 64 * 1024  # it passes the limit as sent
    status, _headers, body = await _post(gateway, bomb, {"Content-Encoding": "gzip"})
    assert (status, body["error"]["code"]) == (413, "body_too_large")


def _key_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.txt"
    path.write_text(
        "# the right key, stored as its hash\n"
        f"sha256:{hash_api_key('sk-right').hex()}\n"
        "sk-limited 2  # two requests a minute\n"
    )
    return path


async def test_api_keys_are_required_checked_and_rate_limited(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str, tmp_path: Path
) -> None:
    """Test that with a key file a missing or wrong key gets 401 ``invalid_api_key``, the
    right one passes, a key over its rate gets 429 with ``Retry-After``, and /healthz,
    /health and /metrics need none."""
    config = {"api_keys_file": _key_file(tmp_path)}
    async with _gateway(nats_server, redis_server, namespace, **config) as gateway:
        before = _errors("invalid_api_key")
        for key in (None, "sk-wrong", "sk-righ", f"sha256:{hash_api_key('sk-right').hex()}"):
            status, body = await _get(gateway, "/v1/models", key)
            assert status == 401, key
            assert b'"invalid_api_key"' in body
        assert _errors("invalid_api_key") == before + 4
        status, headers, error = await _post(gateway, BODY, {"Authorization": "Bearer sk-wrong"})
        assert (status, error["error"]["type"]) == (401, "invalid_request_error")
        assert headers["WWW-Authenticate"].startswith("Bearer")

        assert (await _get(gateway, "/v1/models", "sk-right"))[0] == 200
        # Past the key check the body is read as usual.
        status, _headers, error = await _post(
            gateway, UNKNOWN_MODEL, {"Authorization": "Bearer sk-right"}
        )
        assert (status, error["error"]["code"]) == (404, "model_not_found")
        assert (await _get(gateway, "/healthz"))[0] == 200
        assert (await _get(gateway, "/metrics"))[0] == 200
        # vLLM's /health takes no key either (load tools probe it bare); not ready here.
        assert (await _get(gateway, "/health"))[0] == 503

        assert (await _get(gateway, "/v1/models", "sk-limited"))[0] == 200
        assert (await _get(gateway, "/v1/models", "sk-limited"))[0] == 200
        status, headers, error = await _post(
            gateway, UNKNOWN_MODEL, {"Authorization": "Bearer sk-limited"}
        )
        assert (status, error["error"]["code"]) == (429, "rate_limit_exceeded")
        # Two a minute: the next token is about 30 s away.
        assert 25 <= int(headers["Retry-After"]) <= 30
        # Another key's bucket is its own.
        assert (await _get(gateway, "/v1/models", "sk-right"))[0] == 200


async def test_a_request_over_the_ceiling_gets_429_at_once(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that with ``max_in_flight`` requests held the next gets 429 ``overloaded`` with
    ``Retry-After`` within milliseconds, and is admitted again once one ends."""
    nc = await connect_nats(NatsSettings(url=nats_server.url), "test-ceiling")
    published = asyncio.Event()

    async def on_ingress(_msg: Msg) -> None:
        published.set()

    sub = await nc.subscribe(Subjects(namespace).ingress_wildcard, cb=on_ingress)
    config = {"max_in_flight": 1, "request_timeout_s": 30.0}
    try:
        async with _gateway(nats_server, redis_server, namespace, **config) as gateway:
            # Nothing serves the stream: the first request waits for its reply, held.
            held = asyncio.create_task(_post(gateway, BODY))
            await asyncio.wait_for(published.wait(), 5.0)
            started = time.monotonic()
            status, headers, body = await _post(gateway, BODY)
            took_s = time.monotonic() - started
            assert (status, body["error"]["code"]) == (429, "overloaded")
            assert headers["Retry-After"] == "1"
            assert took_s < 0.5
            held.cancel()
            with pytest.raises(asyncio.CancelledError):
                await held
            # The hang-up gave its place back: a request is read again (and refused on its
            # model, which the ceiling never looks at).
            deadline = time.monotonic() + 5.0
            while (status := (await _post(gateway, UNKNOWN_MODEL))[0]) == 429:
                assert time.monotonic() < deadline, "the place was not given back"
                await asyncio.sleep(0.05)
            assert status == 404
    finally:
        await sub.unsubscribe()
        await nc.close()


async def test_idle_and_slow_connections_are_closed(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a socket that sends nothing, or half a request head, is closed after
    ``idle_timeout_s``, and a body slower than ``body_timeout_s`` gets 408."""
    config = {"idle_timeout_s": 0.5, "body_timeout_s": 0.5}
    async with _gateway(nats_server, redis_server, namespace, **config) as gateway:
        host, port = gateway.url.removeprefix("http://").split(":")
        for sent in (b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(sent)
            started = time.monotonic()
            assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed by the server
            assert time.monotonic() - started < 3.0
            writer.close()

        reader, writer = await asyncio.open_connection(host, int(port))
        head = (
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\n\r\n"
        )
        writer.write(head.encode() + BODY[:10])  # and the rest never comes
        started = time.monotonic()
        answer = await asyncio.wait_for(reader.read(), 5.0)  # the answer, then the close
        assert time.monotonic() - started < 3.0
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408")
        assert b'"body_timeout"' in answer
