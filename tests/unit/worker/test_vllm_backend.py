"""Unit tests of the vllm backend against an in-process sim-engine and a scripted server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp import web

from loadgen.sim_server import SimEngineServer, start_sim_server
from services.worker.vllm_backend import KV_FRACTION_BLOCKS, VllmBackend
from shared.engine import EngineConfig, SimulatedEngine, create_engine
from tests.unit.worker.helpers import RecordingSink, backend_on, classified
from tests.vllm_replay import serving

SPEEDUP = 500.0


@contextlib.asynccontextmanager
async def sim_engine(*, legacy: bool = False) -> AsyncIterator[tuple[str, SimulatedEngine]]:
    """A sim-engine on a free port."""
    engine = create_engine(EngineConfig(max_num_seqs=16))
    server = SimEngineServer(engine, speedup=SPEEDUP, legacy_metric_names=legacy)
    runner, port = await start_sim_server(server)
    try:
        yield f"http://127.0.0.1:{port}", engine
    finally:
        await runner.cleanup()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _vllm_app(completions: Handler) -> web.Application:
    """A vLLM-like server: one served model, and ``completions`` for its completions."""

    async def models(_r: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "llama-3-8b"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    return app


async def test_streamed_requests_get_exact_token_counts_and_end_once() -> None:
    """Test that each request streams exactly max_tokens tokens and finishes with its reason."""
    sink = RecordingSink(expected=3)
    async with sim_engine() as (url, _), backend_on(url, sink) as backend:
        for i, out in enumerate((1, 5, 40)):
            backend.submit(classified(f"r{i}", prompt_tokens=64, max_tokens=out))
        await asyncio.wait_for(sink.ended.wait(), 10.0)
    assert sink.failures == []
    assert [sink.tokens(f"r{i}") for i in range(3)] == [1, 5, 40]
    assert sorted(sink.finished()) == ["r0", "r1", "r2"]
    reasons = [b.finish_reasons for b in sink.batches if b.finished]
    assert all(r is not None and set(r.values()) == {"length"} for r in reasons)


async def test_metrics_are_scraped_into_the_snapshot_with_sim_engine_energy() -> None:
    """Test that running requests, KV blocks, clock and energy come from /metrics."""
    sink = RecordingSink(expected=1)
    async with sim_engine() as (url, engine), backend_on(url, sink) as backend:
        backend.submit(classified("long", prompt_tokens=500, max_tokens=100_000))
        for _ in range(100):
            await backend.refresh()
            if backend.snapshot().running:
                break
            await asyncio.sleep(0.01)
        snap = backend.snapshot()
        assert (snap.running, snap.kv_blocks_total) == (1, engine.kv_blocks_total)
        assert snap.kv_blocks_used >= 500 // 16
        assert snap.clock_mhz == engine.clock_mhz
        await asyncio.sleep(0.05)
        await backend.refresh()
        assert backend.snapshot().energy_j > 0
        assert backend.snapshot().power_w > 0
        backend.abort("long")


async def test_an_aborted_request_closes_its_stream_and_the_engine_frees_its_slot() -> None:
    """Test a cancel's abort: the server sees the connection close and drops the request
    (no more tokens, its sequence and KV blocks freed), and the backend reports neither a
    failure nor a finish for it (the shim has ended it already)."""
    sink = RecordingSink(expected=1)
    async with sim_engine() as (url, engine), backend_on(url, sink) as backend:
        backend.submit(classified("long", prompt_tokens=500, max_tokens=100_000))
        for _ in range(500):
            if sink.tokens("long") >= 3:
                break
            await asyncio.sleep(0.01)
        assert engine.num_running == 1
        backend.abort("long")
        for _ in range(500):
            if not engine.has_work:
                break
            await asyncio.sleep(0.01)
        assert not engine.has_work
        assert engine.kv_blocks_used == 0
        tokens = sink.tokens("long")
        await asyncio.sleep(0.1)
        assert sink.tokens("long") == tokens
    assert tokens < 100_000
    assert sink.failures == []
    assert sink.finished() == []


async def test_the_legacy_kv_gauge_name_is_scraped_too() -> None:
    """Test that a server with vllm:gpu_cache_usage_perc still reports KV use."""
    sink = RecordingSink()
    async with sim_engine(legacy=True) as (url, _), backend_on(url, sink) as backend:
        backend.submit(classified("long", prompt_tokens=800, max_tokens=100_000))
        for _ in range(100):
            await backend.refresh()
            if backend.snapshot().kv_blocks_used:
                break
            await asyncio.sleep(0.01)
        assert backend.metrics.kv_usage is not None
        assert backend.snapshot().kv_blocks_used > 0
        backend.abort("long")


async def test_clock_commands_reach_a_sim_engine_snapped() -> None:
    """Test that a clock is forwarded to the sim-engine's /clock and the applied step returned."""
    sink = RecordingSink()
    async with sim_engine() as (url, engine), backend_on(url, sink) as backend:
        outcome = await backend.set_clock(1001.0)
    assert outcome.accepted
    assert outcome.applied_mhz == engine.clock_mhz == 1005.0


def _scripted_vllm() -> web.Application:
    """A stand-in for a real vLLM server: no clock endpoint, no greenserve series."""

    async def models(_r: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "meta-llama/Meta-Llama-3-8B"}]})

    async def metrics(_r: web.Request) -> web.Response:
        return web.Response(text='vllm:kv_cache_usage_perc{engine="0"} 0.5\n')

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["model"] != "meta-llama/Meta-Llama-3-8B":
            return web.json_response({"error": {"message": "no such model"}}, status=404)
        if body["max_tokens"] == 13:
            return web.json_response({"error": {"message": "too long"}}, status=400)
        response = web.StreamResponse()
        await response.prepare(request)
        event: dict[str, object]
        if body["max_tokens"] == 2:
            event = {"object": "error", "message": "engine died"}
        else:  # no per-chunk usage: one token counted, final usage tops up to 3
            event = {"choices": [{"text": "a", "finish_reason": "stop"}]}
        await response.write(f"data: {json.dumps(event)}\n\n".encode())
        final = {"choices": [], "usage": {"completion_tokens": 3}}
        await response.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    return app


async def test_a_real_vllm_server_gets_its_served_name_and_clock_commands_are_refused() -> None:
    """Test name discovery, usage top-up, stop reasons, error mapping and clock refusal."""
    sink = RecordingSink(expected=3)
    async with serving(_scripted_vllm()) as url, backend_on(url, sink) as backend:
        assert backend.served_model == "meta-llama/Meta-Llama-3-8B"
        for rid, out in (("ok", 3), ("rejected", 13), ("broken", 2)):
            backend.submit(classified(rid, max_tokens=out))
        await asyncio.wait_for(sink.ended.wait(), 5.0)
        outcome = await backend.set_clock(1200.0)
        snap = backend.snapshot()
    assert sink.tokens("ok") == 3
    assert [b.finish_reasons for b in sink.batches if b.finished] == [{"ok": "stop"}]
    assert sorted((rid, code) for rid, code, _ in sink.failures) == [
        ("broken", "engine_error"),
        ("rejected", "engine_rejected"),
    ]
    assert not outcome.accepted
    assert "worker.gpu_clocks nvml" in outcome.reason
    assert (snap.kv_blocks_total, snap.kv_blocks_used) == (KV_FRACTION_BLOCKS, 500)
    assert (snap.energy_j, snap.power_w, snap.clock_mhz) == (0.0, 0.0, 0.0)


async def test_an_unreachable_server_fails_requests_clearly_and_keeps_stats() -> None:
    """Test that a refused connection ends the request with engine_unavailable."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    sink = RecordingSink()
    async with backend_on(f"http://127.0.0.1:{port}", sink) as backend:
        backend.submit(classified("a"))
        await asyncio.wait_for(sink.ended.wait(), 5.0)
        await backend.refresh()
        assert backend.snapshot().running == 0
    assert [(rid, code) for rid, code, _ in sink.failures] == [("a", "engine_unavailable")]


async def test_the_sim_engine_answers_plain_json_completions_and_health() -> None:
    """Test the non-streaming completion, /health and /v1/models of the sim-engine."""
    async with sim_engine() as (url, _), aiohttp.ClientSession() as http:
        async with http.get(f"{url}/health") as resp:
            assert resp.status == 200
        body = {"model": "llama-3-8b", "prompt": [5] * 20, "max_tokens": 6}
        async with http.post(f"{url}/v1/completions", json=body) as resp:
            answer = await resp.json()
        async with http.get(f"{url}/metrics") as resp:
            text = await resp.text()
    assert answer["usage"] == {"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26}
    assert answer["choices"][0]["finish_reason"] == "length"
    assert 'vllm:generation_tokens_total{model_name="llama-3-8b"} 6.0' in text


def _garbling_vllm() -> web.Application:
    """A server whose stream events have the wrong shapes (a broken proxy, another API)."""

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        response = web.StreamResponse()
        await response.prepare(request)
        # choices not a list of objects: the token counter cannot read them
        event = {"choices": 5} if body["max_tokens"] == 1 else {"choices": ["a"]}
        await response.write(f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode())
        return response

    return _vllm_app(completions)


async def test_a_stream_of_unexpected_shape_ends_its_request_with_an_error() -> None:
    """Test that an unreadable event fails the request instead of killing its task silently
    (the request would hold its worker slot for good and its client would never hear)."""
    sink = RecordingSink(expected=2)
    async with serving(_garbling_vllm()) as url, backend_on(url, sink) as backend:
        backend.submit(classified("int-choices", max_tokens=1))
        backend.submit(classified("str-choice", max_tokens=4))
        await asyncio.wait_for(sink.ended.wait(), 5.0)
    assert sorted((rid, code) for rid, code, _ in sink.failures) == [
        ("int-choices", "engine_error"),
        ("str-choice", "engine_error"),
    ]


def _stalling_vllm(stalled: asyncio.Event, release: asyncio.Event) -> web.Application:
    """A server that sends one chunk, then keeps the connection open and says nothing until
    ``release`` is set."""

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.json()
        response = web.StreamResponse()
        await response.prepare(request)
        event = {"choices": [{"text": "a", "finish_reason": None}]}
        await response.write(f"data: {json.dumps(event)}\n\n".encode())
        stalled.set()
        await release.wait()  # not a long sleep: the runner's cleanup waits for handlers
        return response

    return _vllm_app(completions)


async def test_a_stream_that_stalls_mid_way_ends_its_request_after_the_read_timeout() -> None:
    """Test that an engine silent past the read timeout, connection open, fails the request
    with engine_error (without a read limit it held the request and its slot for good)."""
    stalled, release = asyncio.Event(), asyncio.Event()
    sink = RecordingSink()
    async with serving(_stalling_vllm(stalled, release)) as url:
        backend = VllmBackend(url, gpu="A100-80GB", model="llama-3-8b", tp=1, read_timeout_s=0.3)
        try:
            await backend.start(sink)
            backend.submit(classified("stalled", max_tokens=5))
            await asyncio.wait_for(stalled.wait(), 5.0)
            await asyncio.wait_for(sink.ended.wait(), 3.0)
        finally:
            release.set()
            await backend.close()
    assert sink.tokens("stalled") == 1
    assert [(rid, code) for rid, code, _ in sink.failures] == [("stalled", "engine_error")]
    assert "0.3 s" in sink.failures[0][2]


def _aborting_vllm() -> web.Application:
    """A server that streams two tokens, then ends the request with ``abort``."""

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.json()
        response = web.StreamResponse()
        await response.prepare(request)
        for reason in (None, "abort"):
            event = {"choices": [{"text": "a", "finish_reason": reason}]}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    return _vllm_app(completions)


async def test_a_request_the_engine_aborted_is_a_failure_not_a_completion() -> None:
    """Test that finish_reason "abort" (vLLM dropped the request) ends it with engine_error,
    where it passed for a finished answer with its partial text."""
    sink = RecordingSink()
    async with serving(_aborting_vllm()) as url, backend_on(url, sink) as backend:
        backend.submit(classified("dropped", max_tokens=8))
        await asyncio.wait_for(sink.ended.wait(), 5.0)
    assert [(rid, code) for rid, code, _ in sink.failures] == [("dropped", "engine_error")]
    assert not [b for b in sink.batches if b.finished]


async def test_only_a_supported_clock_reaches_the_clock_endpoint_and_snapped() -> None:
    """Test that a clock outside the GPU's range is refused without being forwarded, and an
    in-range one goes out on the GPU's 15-MHz grid (the endpoint drives real hardware)."""
    received: list[float] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        return web.json_response({})

    async def clock(request: web.Request) -> web.Response:
        asked = float((await request.json())["clock_mhz"])
        received.append(asked)
        return web.json_response({"applied_mhz": asked})

    app = _vllm_app(completions)
    app.router.add_post("/clock", clock)
    async with serving(app) as url:
        clock_url = f"{url}/clock"
        backend = VllmBackend(url, gpu="A100-80GB", model="llama-3-8b", tp=1, clock_url=clock_url)
        try:
            await backend.start(RecordingSink())
            too_high = await backend.set_clock(5000.0)
            too_low = await backend.set_clock(-1.0)
            snapped = await backend.set_clock(1001.0)
        finally:
            await backend.close()
    assert not too_high.accepted
    assert "outside A100-80GB's supported 210-1410 MHz" in too_high.reason
    assert not too_low.accepted
    assert snapped.accepted
    assert received == [1005.0]
