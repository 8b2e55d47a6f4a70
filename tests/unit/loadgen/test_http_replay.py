"""The HTTP replay's client behaviour at a gateway that is not listening yet."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web

from loadgen.http_replay import replay_http
from loadgen.traces import TraceRequest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _FlakyGateway:
    """Answers the replay's untimed first request, then stops listening for ``down_s``."""

    def __init__(self, port: int, down_s: float) -> None:
        self.port = port
        self.down_s = down_s
        self.runner: web.AppRunner | None = None
        self._restart: asyncio.Task[None] | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self._restart is None:
            self._restart = asyncio.create_task(self._go_down())
        return web.json_response({"usage": {"completion_tokens": body["max_tokens"]}})

    async def _go_down(self) -> None:
        await asyncio.sleep(0.01)  # the warm-up's response is on its way
        assert self.runner is not None
        await self.runner.cleanup()
        await asyncio.sleep(self.down_s)
        await self.start()

    async def close(self) -> None:
        if self._restart is not None:
            await self._restart
        if self.runner is not None:
            await self.runner.cleanup()


async def _replay_while_down(connect_retry_s: float) -> tuple[list[int], list[str], int]:
    """Two requests sent while the gateway is down (0.2 and 0.25 s into the replay; it
    listens again about 0.6 s in)."""
    gateway = _FlakyGateway(_free_port(), down_s=0.6)
    await gateway.start()
    try:
        records = await replay_http(
            [f"http://127.0.0.1:{gateway.port}"],
            [TraceRequest(0.2, 8, 3), TraceRequest(0.25, 8, 5)],
            model="m",
            timeout_s=5.0,
            connect_retry_s=connect_retry_s,
        )
    finally:
        await gateway.close()
    return (
        [r.completion_tokens for r in records],
        [r.error for r in records],
        sum(r.retries for r in records),
    )


async def test_a_refused_request_is_sent_again_until_the_gateway_listens() -> None:
    """Test that with a retry window the requests refused while the gateway was down are
    answered once it listens, after retries, and their latency counts from the first try."""
    tokens, errors, retries = await _replay_while_down(connect_retry_s=5.0)
    assert tokens == [3, 5]
    assert errors == ["", ""]
    assert retries >= 2


async def test_without_a_retry_window_a_refused_request_fails_at_once() -> None:
    """Test that the default replay reports the refusal (the control-plane bench's client
    does not retry: a retry would hide the refusal in its latency)."""
    tokens, errors, retries = await _replay_while_down(connect_retry_s=0.0)
    assert tokens == [0, 0]
    assert errors == ["ClientConnectorError", "ClientConnectorError"]
    assert retries == 0
