"""A local HTTP server that answers as vLLM does, from the recorded fixtures.

``tests/fixtures/vllm/<version>/`` holds what a vLLM release answers (see its README): the
server replays those bytes with vLLM's status codes and content types, so a client under
test meets the release's shapes, not a hand-written imitation of them. It records what it
was asked and whether each completion's client closed the connection before the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

__all__ = ["FIXTURES", "VLLM_VERSION", "VllmReplay", "fixture", "replaying", "sse_events"]

VLLM_VERSION: Final = "0.34.0"
FIXTURES: Final = Path(__file__).parent / "fixtures" / "vllm" / VLLM_VERSION

SSE_TYPE: Final = "text/event-stream"
METRICS_TYPE: Final = "text/plain; version=1.0.0; charset=utf-8"
"""prometheus_client's CONTENT_TYPE_LATEST, which vLLM's /metrics answers with."""


def fixture(name: str) -> str:
    """The text of one recorded response."""
    return (FIXTURES / name).read_text(encoding="utf-8")


def sse_events(name: str) -> list[bytes]:
    """A recorded SSE stream split into its events (each with its blank-line end)."""
    return [part.encode() + b"\n\n" for part in fixture(name).split("\n\n") if part]


@dataclass
class VllmReplay:
    """The replaying server's behaviour and what it saw.

    ``completions`` is the SSE fixture each ``POST /v1/completions`` streams; a request
    whose ``max_tokens`` is in ``rejected`` gets the recorded 400 instead. With ``hold_after``
    set, a stream stops after that many events and waits, connection open, until its client
    closes it (a long generation cut short).
    """

    completions: str = "completions_stream.sse"
    rejected: frozenset[int] = frozenset()
    hold_after: int | None = None
    healthy: bool = True
    event_gap_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    holding: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        """The aiohttp application of the replaying server."""
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/completions", self._completions)
        return app

    async def _health(self, _request: web.Request) -> web.Response:
        recorded = json.loads(fixture("health.json"))["ready" if self.healthy else "engine_dead"]
        return web.Response(status=recorded["status"], body=recorded["body"].encode())

    async def _models(self, _request: web.Request) -> web.Response:
        return web.Response(text=fixture("models.json"), content_type="application/json")

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = fixture("metrics.txt").encode()
        return web.Response(body=body, headers={"Content-Type": METRICS_TYPE})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if body.get("max_tokens") in self.rejected:
            return web.Response(
                status=400, text=fixture("completions_400.json"), content_type="application/json"
            )
        response = web.StreamResponse(headers={"Content-Type": SSE_TYPE})
        await response.prepare(request)
        events = sse_events(self.completions)
        if self.hold_after is not None:
            events = events[: self.hold_after]
        try:
            for event in events:
                await response.write(event)
                if self.event_gap_s:
                    await asyncio.sleep(self.event_gap_s)
            if self.hold_after is not None:
                self.holding.set()
                await self._until_closed(request)
                return response
        except ConnectionError:
            self.disconnected.set()
            return response
        await response.write_eof()
        return response

    async def _until_closed(self, request: web.Request) -> None:
        # vLLM aborts a request when its client's connection closes; here the close is only
        # observed, through the transport aiohttp drops when the connection is lost (it
        # sets no event a handler could await).
        while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        self.disconnected.set()


@contextlib.asynccontextmanager
async def serving(app: web.Application, shutdown_timeout: float = 60.0) -> AsyncIterator[str]:
    """``app`` on a free loopback port, its base URL yielded for the block (``shutdown_timeout``
    as aiohttp's runner takes it)."""
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def replaying(replay: VllmReplay) -> AsyncIterator[str]:
    """``replay`` served on a free loopback port; its base URL for the block."""
    async with serving(replay.app(), shutdown_timeout=1.0) as url:
        yield url
