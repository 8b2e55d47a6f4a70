"""``greenserve sim-engine``: an HTTP server that speaks vLLM's API, driven by the engine model.

The role llm-d-inference-sim plays for llm-d: the ``vllm`` worker backend, the profiler
and any OpenAI client can run against a simulated GPU exactly as against vLLM. Served:
``POST /v1/completions`` (SSE streaming and plain JSON, ``max_tokens``, ``ignore_eos``,
``stream_options`` with ``include_usage`` / ``continuous_usage_stats``), ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (vLLM's metric names plus ``greenserve:*`` clock and energy
series) and ``POST /clock`` (set the SM clock, snapped; returns the applied clock).

The engine (:func:`shared.engine.create_engine`) runs in model time with speed-up K. It
has no end-of-sequence model: every request generates exactly ``max_tokens`` tokens. A text
prompt is sized at :data:`CHARS_PER_TOKEN` characters per token; a list of token ids by
its length.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from loadgen.sim_requests import CompletionParams, parse_completion_request
from services.worker.pacing import PacedEngine
from services.worker.vllm_metrics import (
    CACHE_CONFIG_INFO,
    ENERGY_J,
    GENERATION_TOKENS,
    KV_USAGE_NEW,
    KV_USAGE_OLD,
    MODEL_TIME_S,
    NUM_PREEMPTIONS,
    PROMPT_TOKENS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    SM_CLOCK_MHZ,
)
from shared.engine import Engine, IterationResult

__all__ = ["TOKEN_TEXT", "SimEngineServer", "start_sim_server"]

TOKEN_TEXT: Final = " tok"
"""Text of every generated token (the content is irrelevant to timing and energy)."""


@dataclass(slots=True)
class _Live:
    """A request in the engine: token events waiting for its HTTP handler."""

    events: asyncio.Queue[tuple[int, bool]] = field(default_factory=asyncio.Queue)
    """(tokens, finished) per iteration that touched the request."""


class SimEngineServer:
    """An engine model behind an OpenAI-compatible HTTP API."""

    def __init__(
        self,
        engine: Engine,
        *,
        speedup: float = 1.0,
        served_model: str | None = None,
        legacy_metric_names: bool = False,
    ) -> None:
        """Serve ``engine`` at ``speedup`` model seconds per wall second.

        Args:
            engine: the engine model.
            speedup: model seconds per wall second.
            served_model: model name clients must send (default: the engine's model).
            legacy_metric_names: publish ``vllm:gpu_cache_usage_perc`` (vLLM before the
                rename) instead of ``vllm:kv_cache_usage_perc``.
        """
        self._paced = PacedEngine(engine, speedup)
        self._engine = engine
        self._served_model = served_model or engine.config.model
        self._kv_metric = KV_USAGE_OLD if legacy_metric_names else KV_USAGE_NEW
        self._live: dict[str, _Live] = {}
        self._totals: Counter[str] = Counter()

    @property
    def served_model(self) -> str:
        """Model name this server answers to."""
        return self._served_model

    def application(self) -> web.Application:
        """The aiohttp application (the engine loop runs while the app runs)."""
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/clock", self._get_clock)
        app.router.add_post("/clock", self._set_clock)
        app.cleanup_ctx.append(self._engine_loop)
        return app

    async def _engine_loop(self, _app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(self._paced.run(self._on_iteration), name="sim-engine")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _on_iteration(self, result: IterationResult, _at: float) -> None:
        self._totals["prompt"] += result.prefill_tokens
        self._totals["generation"] += len(result.emitted)
        self._totals["preemptions"] += len(result.preempted)
        finished = set(result.finished)
        for rid, tokens in Counter(result.emitted).items():
            live = self._live.get(rid)
            if live is not None:
                live.events.put_nowait((tokens, rid in finished))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON")
        parsed = parse_completion_request(body, self._served_model)
        if isinstance(parsed, tuple):
            return _error(*parsed)
        rid = f"cmpl-{uuid.uuid4().hex}"
        live = _Live()
        self._live[rid] = live
        try:
            self._paced.add(rid, parsed.prompt_tokens, parsed.max_tokens)
        except ValueError as exc:
            del self._live[rid]
            return _error(400, str(exc))
        try:
            if parsed.stream:
                return await self._stream(request, rid, live, parsed)
            return await self._whole(rid, live, parsed)
        finally:
            # Reached early only when the client went away: free the engine's slot.
            if self._live.pop(rid, None) is not None:
                self._paced.abort(rid)

    def _chunk(self, rid: str, text: str, done: bool) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": self._served_model,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": "length" if done else None,
                    "stop_reason": None,
                }
            ],
        }

    async def _stream(
        self, request: web.Request, rid: str, live: _Live, params: CompletionParams
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        produced = 0
        done = False
        while not done:
            tokens, done = await live.events.get()
            produced += tokens
            chunk = self._chunk(rid, TOKEN_TEXT * tokens, done)
            chunk["usage"] = params.usage(produced) if params.continuous_usage else None
            await response.write(_sse(chunk))
        self._live.pop(rid, None)
        if params.include_usage:
            final = {**self._chunk(rid, "", True), "choices": []}
            final["usage"] = params.usage(produced)
            await response.write(_sse(final))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _whole(self, rid: str, live: _Live, params: CompletionParams) -> web.Response:
        produced = 0
        done = False
        while not done:
            tokens, done = await live.events.get()
            produced += tokens
        self._live.pop(rid, None)
        body = self._chunk(rid, TOKEN_TEXT * produced, True)
        body["usage"] = params.usage(produced)
        return web.json_response(body)

    async def _models(self, _request: web.Request) -> web.Response:
        model = {
            "id": self._served_model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "greenserve-sim-engine",
            "root": self._served_model,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _metrics(self, _request: web.Request) -> web.Response:
        self._paced.catch_up()  # idle energy up to now
        eng = self._engine
        label = f'{{model_name="{self._served_model}"}}'
        cache_labels = (
            f'{{block_size="{eng.config.block_size}",num_gpu_blocks="{eng.kv_blocks_total}"}}'
        )
        usage = eng.kv_blocks_used / eng.kv_blocks_total if eng.kv_blocks_total else 0.0
        series = [
            ("gauge", REQUESTS_RUNNING, label, eng.num_running),
            ("gauge", REQUESTS_WAITING, label, eng.num_waiting),
            ("gauge", self._kv_metric, label, usage),
            ("gauge", CACHE_CONFIG_INFO, cache_labels, 1.0),
            ("counter", PROMPT_TOKENS, label, self._totals["prompt"]),
            ("counter", GENERATION_TOKENS, label, self._totals["generation"]),
            ("counter", NUM_PREEMPTIONS, label, self._totals["preemptions"]),
            ("gauge", SM_CLOCK_MHZ, label, eng.clock_mhz),
            ("counter", ENERGY_J, label, eng.energy_j),
            ("gauge", MODEL_TIME_S, label, eng.now_s),
        ]
        lines = []
        for kind, name, labels, value in series:
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{labels} {float(value)!r}")
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def _clock_body(self) -> dict[str, Any]:
        return {
            "clock_mhz": self._engine.clock_mhz,
            "supported_mhz": list(self._engine.supported_clocks_mhz),
        }

    async def _get_clock(self, _request: web.Request) -> web.Response:
        return web.json_response(self._clock_body())

    async def _set_clock(self, request: web.Request) -> web.Response:
        try:
            mhz = float((await request.json())["clock_mhz"])
        except (ValueError, KeyError, TypeError):
            return _error(400, 'send {"clock_mhz": <number>}')
        applied = self._engine.set_clock_mhz(mhz)
        return web.json_response({"applied_mhz": applied, **self._clock_body()})


def _sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


def _error(status: int, message: str) -> web.Response:
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status=status,
    )


async def start_sim_server(
    server: SimEngineServer, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int]:
    """Start ``server`` on ``host:port`` (0 picks a free port); returns the runner and port."""
    runner = web.AppRunner(server.application(), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = next(addr[1] for addr in runner.addresses if isinstance(addr, tuple))
    return runner, int(bound)
