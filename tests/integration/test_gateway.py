"""The OpenAI-compatible gateway in front of the whole in-process stack, with the openai client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from nats.aio.msg import Msg

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, stack_launches
from proto.codec import decode
from proto.messages import Request, Sampling
from proto.subjects import Subjects
from services.gateway.app import CELL_REQUESTS
from services.gateway.service import Gateway, open_gateway
from shared.bus import connect_nats
from shared.config import GatewaySettings, NatsSettings
from shared.counters import ERRORS
from shared.servers import ServerProcess

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.connected

PLACEHOLDER = " tok"
EXACT = {"prompt_tokens": 24, "ignore_eos": True}
"""Extension fields: known prompt length, exactly max_tokens generated."""


def _spec(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    speedup: float = 50.0,
    worker: dict[str, Any] | None = None,
) -> StackSpec:
    return StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=1,
        regions=("PJM",),
        speedup=speedup,
        origin_wall_s=time.time(),
        # The classifier's NATS drain waits out this timeout on stop; keep the test short.
        extra={"shutdown_timeout_s": 1.0, **({"worker": worker} if worker else {})},
    )


@contextlib.asynccontextmanager
async def _gateway(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    speedup: float = 50.0,
    worker: dict[str, Any] | None = None,
) -> AsyncIterator[Gateway]:
    launches = stack_launches(_spec(nats_server, redis_server, namespace, speedup, worker))
    config = GatewaySettings(port=0, max_body_bytes=64 * 1024, request_timeout_s=20.0)
    async with run_in_process(launches), open_gateway(launches[0].settings, config) as gateway:
        yield gateway


async def _completions(client: Any) -> dict[str, Any]:
    plain = await client.completions.create(
        model="llama-3-8b", prompt="Say hi", max_tokens=7, extra_body=EXACT
    )
    stream = await client.completions.create(
        model="llama-3-8b", prompt="Say hi", max_tokens=5, stream=True, extra_body=EXACT
    )
    streamed = [chunk async for chunk in stream]
    return {"plain": plain, "streamed": streamed}


async def _chats(client: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Say hi"}]
    plain = await client.chat.completions.create(
        model="llama-3-8b", messages=messages, max_tokens=6, extra_body=EXACT
    )
    stream = await client.chat.completions.create(
        model="llama-3-8b",
        messages=messages,
        max_completion_tokens=9,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=EXACT,
    )
    streamed = [chunk async for chunk in stream]
    return {"plain": plain, "streamed": streamed}


async def test_openai_client_gets_exact_token_counts_streaming_and_not(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that completions and chat completions, streamed and not, return the asked tokens."""
    async with _gateway(nats_server, redis_server, namespace) as gateway:
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        try:
            done, chat, models = await asyncio.gather(
                _completions(client), _chats(client), client.models.list()
            )
        finally:
            await client.close()
    assert done["plain"].usage.completion_tokens == 7
    assert done["plain"].usage.prompt_tokens == 24
    assert done["plain"].choices[0].text == PLACEHOLDER * 7
    assert done["plain"].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].text for c in done["streamed"]) == PLACEHOLDER * 5
    assert done["streamed"][-1].choices[0].finish_reason == "length"
    assert chat["plain"].choices[0].message.content == PLACEHOLDER * 6
    assert chat["plain"].usage.completion_tokens == 6
    deltas = [c.choices[0].delta.content or "" for c in chat["streamed"] if c.choices]
    assert "".join(deltas) == PLACEHOLDER * 9
    assert chat["streamed"][-1].usage.completion_tokens == 9
    assert "llama-3-8b" in {m.id for m in models.data}


_CHAT = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "x"}]}
_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

BAD_REQUESTS: dict[str, tuple[str, bytes | dict[str, Any], int, str]] = {
    "bad json": ("/v1/completions", b'{"model": "llama-3-8b", "prompt": ', 400, "invalid_json"),
    "not an object": ("/v1/completions", b"[1, 2]", 400, "invalid_type"),
    "string max_tokens": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "max_tokens": "ten"},
        400,
        "invalid_type",
    ),
    "negative max_tokens": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "max_tokens": -3},
        400,
        "invalid_value",
    ),
    "absurd max_tokens": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "max_tokens": 10**12},
        400,
        "invalid_value",
    ),
    "unknown model": (
        "/v1/completions",
        {"model": "gpt-99", "prompt": "x"},
        404,
        "model_not_found",
    ),
    "missing prompt": ("/v1/completions", {"model": "llama-3-8b"}, 400, "missing_field"),
    "empty messages": (
        "/v1/chat/completions",
        {"model": "llama-3-8b", "messages": []},
        400,
        "missing_field",
    ),
    "oversized body": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x" * 100_000},
        413,
        "body_too_large",
    ),
    "beyond context": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "prompt_tokens": 8000, "max_tokens": 500},
        400,
        "too_long",
    ),
    "unknown route": ("/v1/embeddings", {"model": "llama-3-8b"}, 404, "not_found"),
    "deeply nested json": ("/v1/completions", b"[" * 5000 + b"]" * 5000, 400, "invalid_json"),
    "both token limits": (
        "/v1/chat/completions",
        {**_CHAT, "max_tokens": 3, "max_completion_tokens": 5},
        400,
        "invalid_parameter_combination",
    ),
    "stream_options without stream": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "stream_options": {"include_usage": True}},
        400,
        "invalid_value",
    ),
    "logprobs": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "logprobs": 2},
        400,
        "unsupported",
    ),
    "chat logprobs": ("/v1/chat/completions", {**_CHAT, "logprobs": True}, 400, "unsupported"),
    "json output": (
        "/v1/chat/completions",
        {**_CHAT, "response_format": {"type": "json_object"}},
        400,
        "unsupported",
    ),
    "forced tool call": (
        "/v1/chat/completions",
        {**_CHAT, "tools": [_TOOL], "tool_choice": "required"},
        400,
        "unsupported",
    ),
    "unknown role": (
        "/v1/chat/completions",
        {"model": "llama-3-8b", "messages": [{"role": "robot", "content": "x"}]},
        400,
        "invalid_value",
    ),
    "stop not text": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "stop": 5},
        400,
        "invalid_type",
    ),
    "temperature out of range": (
        "/v1/chat/completions",
        {**_CHAT, "temperature": 2.5},
        400,
        "invalid_value",
    ),
    "seed not an integer": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "seed": "7"},
        400,
        "invalid_type",
    ),
    "user not text": (
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "x", "user": 5},
        400,
        "invalid_type",
    ),
}


async def test_a_client_leaving_mid_stream_frees_its_reply_queue_and_the_gateway_serves_on(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a streaming client that hangs up after the first event leaves nothing open
    in the gateway (its reply queue is closed) long before its generation would end (real
    time: 4,000 tokens take about 50 s), and the next client is served in full."""
    async with _gateway(nats_server, redis_server, namespace, speedup=1.0) as gateway:
        body = {"model": "llama-3-8b", "prompt": "x", "max_tokens": 4000, "stream": True, **EXACT}
        async with aiohttp.ClientSession() as session:
            response = await session.post(f"{gateway.url}/v1/completions", json=body)
            assert response.status == 200
            first = await response.content.readline()
            assert first.startswith(b"data: ")
            response.close()  # hang up mid-stream
        for _ in range(200):  # the handler sees the hang-up at its next write
            if not gateway.state.router:
                break
            await asyncio.sleep(0.05)
        assert len(gateway.state.router) == 0
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        try:
            after = await client.completions.create(
                model="llama-3-8b", prompt="Say hi", max_tokens=3, extra_body=EXACT
            )
        finally:
            await client.close()
    assert after.usage.completion_tokens == 3


async def test_bad_requests_get_documented_statuses_and_openai_error_bodies(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that each kind of bad request gets its documented status, error code and counter."""
    before = ERRORS.labels("gateway", "invalid_json")._value.get()
    seen: dict[str, tuple[int, str]] = {}
    async with (
        _gateway(nats_server, redis_server, namespace) as gateway,
        aiohttp.ClientSession() as session,
    ):
        url = gateway.url
        for name, (path, body, _, _) in BAD_REQUESTS.items():
            kwargs: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
            async with session.post(f"{url}{path}", **kwargs) as response:
                text = await response.text()
                # A body that is not OpenAI's error JSON shows as itself in the comparison.
                is_json = response.content_type == "application/json"
                answer = json.loads(text) if is_json else {"error": {"code": text[:40]}}
                code = answer.get("error", {}).get("code", "accepted")
                seen[name] = (response.status, code)
        async with session.get(f"{url}/healthz") as response:
            health = response.status
    assert seen == {name: (status, code) for name, (_, _, status, code) in BAD_REQUESTS.items()}
    assert health == 200
    assert ERRORS.labels("gateway", "invalid_json")._value.get() == before + 2  # + nested


async def test_the_carbon_aware_query_answers_from_the_forecaster_s_forecasts(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test ``/emissions/forecasts/current`` against the live forecaster's stored forecast.

    The forecaster of a PJM stack runs beside the gateway; once it has stored a forecast,
    a 4-hour window query lists every window of the forecast with the lowest as optimal, in
    the carbon-aware-sdk's shape; a region without a forecast is a 404 that is counted.
    """
    spec = _spec(nats_server, redis_server, namespace)
    launches = [la for la in stack_launches(spec) if la.module == "services.forecaster"]
    config = GatewaySettings(port=0)
    url = "/emissions/forecasts/current"
    before = ERRORS.labels("gateway", "location_not_found")._value.get()
    async with (
        run_in_process(launches),
        open_gateway(launches[0].settings, config) as gateway,
        aiohttp.ClientSession(gateway.url) as http,
    ):
        # The forecaster stores its first forecast once started: until then, a 404.
        deadline = time.monotonic() + 30.0
        while True:
            async with http.get(url, params={"location": "PJM", "windowSize": "240"}) as resp:
                status, body = resp.status, await resp.json()
            if status == 200 or time.monotonic() > deadline:
                break
            assert status == 404, body
            await asyncio.sleep(0.2)
        assert status == 200, body
        [answer] = body
        async with http.get(url, params=[("location", "PJM"), ("location", "ERCO")]) as missing:
            assert missing.status == 404
            assert "ERCO" in (await missing.json())["detail"]  # the SDK's problem details
    data = answer["forecastData"]
    assert answer["location"] == "PJM"
    assert answer["windowSize"] == 240
    assert len(data) == launches[0].settings.forecaster.horizon_h - 3
    assert all(p["duration"] == 240 and p["value"] > 0 for p in data)
    assert answer["optimalDataPoints"] == [min(data, key=lambda p: p["value"])]
    assert ERRORS.labels("gateway", "location_not_found")._value.get() >= before + 1


async def test_a_gateway_over_cells_spreads_requests_and_skips_a_cell_without_ingress(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test ``gateway.cells``: one gateway in front of two whole stacks (cells) and a third
    namespace with no stack. Every request is answered with its tokens; both live cells
    take requests (each answers on its own reply space, which the gateway subscribes to);
    the cell without an ingress stream takes none, is marked down, and costs no request."""
    cells = [namespace, f"{namespace}b", f"{namespace}ghost"]
    first, second = (stack_launches(_spec(nats_server, redis_server, c)) for c in cells[:2])
    config = GatewaySettings(port=0, request_timeout_s=20.0, cells=tuple(cells))
    before = {c: CELL_REQUESTS.labels(c)._value.get() for c in cells}
    body = {"model": "llama-3-8b", "prompt": "Say hi", "max_tokens": 3, **EXACT}

    async def ask(http: aiohttp.ClientSession) -> tuple[int, str]:
        async with http.post("/v1/completions", json=body) as response:
            answer = await response.json()
            return response.status, answer["choices"][0]["text"] if "choices" in answer else ""

    async with (
        run_in_process(first),
        run_in_process(second),
        open_gateway(first[0].settings, config) as gateway,
        aiohttp.ClientSession(gateway.url) as http,
    ):
        answers = await asyncio.gather(*(ask(http) for _ in range(12)))
        ghost = gateway.state.cells.cells[2]
        in_flight = [c.in_flight for c in gateway.state.cells.cells]
    assert answers == [(200, PLACEHOLDER * 3)] * 12
    taken = {c: CELL_REQUESTS.labels(c)._value.get() - before[c] for c in cells}
    assert taken[cells[0]] + taken[cells[1]] == 12
    assert min(taken[cells[0]], taken[cells[1]]) >= 3, taken
    assert taken[cells[2]] == 0
    assert ghost.down_until > 0.0
    assert in_flight == [0, 0, 0]  # every request released its cell


async def test_the_openai_client_retrieves_a_served_model_and_gets_a_404_for_another(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test ``GET /v1/models/{id}`` through ``models.retrieve``: a served model in OpenAI's
    ``model`` shape, an unknown one a ``NotFoundError`` with code ``model_not_found``."""
    async with _gateway(nats_server, redis_server, namespace) as gateway:
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        try:
            model = await client.models.retrieve("llama-3-8b")
            with pytest.raises(openai.NotFoundError) as missing:
                await client.models.retrieve("gpt-99")
        finally:
            await client.close()
    assert (model.id, model.object, model.owned_by) == ("llama-3-8b", "model", "greenserve")
    assert missing.value.code == "model_not_found"
    assert missing.value.param == "model"


async def _sse_events(response: aiohttp.ClientResponse) -> list[str]:
    raw = (await response.read()).decode()
    assert raw.endswith("\n\n")
    return [event.removeprefix("data: ") for event in raw.strip().split("\n\n")]


async def test_openai_shapes_token_id_batches_usage_nulls_and_405s(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test shapes the openai client or OpenAI's reference define:

    * ``prompt=[[ids]]`` (the client's type for a batch of token-id prompts) with one
      prompt is served, its length the prompt's;
    * with ``stream_options.include_usage`` every chunk carries ``usage``, null until the
      usage-only last one (OpenAI's documented stream shape);
    * a wrong method is a 405 ``invalid_request_error`` that keeps its ``Allow`` header.
    """
    async with (
        _gateway(nats_server, redis_server, namespace) as gateway,
        aiohttp.ClientSession(gateway.url) as http,
    ):
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        try:
            batch = await client.completions.create(
                model="llama-3-8b",
                prompt=[[1, 2, 3]],
                max_tokens=2,
                extra_body={"ignore_eos": True},
            )
        finally:
            await client.close()
        body = {**_CHAT, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
        async with http.post("/v1/chat/completions", json={**body, **EXACT}) as response:
            events = await _sse_events(response)
        async with http.delete("/v1/completions") as wrong:
            wrong_body, allow = await wrong.json(), wrong.headers.get("Allow")
    assert batch.usage.prompt_tokens == 3
    assert batch.choices[0].text == PLACEHOLDER * 2
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert wrong.status == 405
    assert allow == "POST"
    assert wrong_body["error"]["type"] == "invalid_request_error"


async def test_an_internal_failure_is_an_openai_error_body_not_a_text_page(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a failure the gateway did not foresee (here a stored forecast it cannot
    decode) is answered as a JSON 500 ``server_error`` in OpenAI's error shape, and the
    gateway serves on."""
    async with (
        _gateway(nats_server, redis_server, namespace) as gateway,
        aiohttp.ClientSession(gateway.url) as http,
    ):
        state = gateway.state
        assert state.store is not None
        assert state.keys is not None
        await state.store.set(state.keys.forecast("XYZ"), b"not a forecast")
        url = "/emissions/forecasts/current"
        async with http.get(url, params={"location": "XYZ"}) as response:
            status, kind, text = response.status, response.content_type, await response.text()
        async with http.get("/healthz") as health:
            healthy = health.status
    assert (status, kind) == (500, "application/json"), text
    body = json.loads(text)
    assert body["error"]["type"] == "server_error"
    assert body["error"]["code"] == "internal"
    assert healthy == 200


@contextlib.asynccontextmanager
async def _recording_vllm(bodies: list[dict[str, Any]]) -> AsyncIterator[str]:
    """A scripted vLLM server that records every completion body it is sent.

    It answers as vLLM would: two tokens, then ``finish_reason`` ``stop`` (a stop sequence
    matched, or end-of-sequence), with cumulative usage on every chunk.
    """

    async def models(_r: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "llama-3-8b"}]})

    async def metrics(_r: web.Request) -> web.Response:
        return web.Response(text='vllm:kv_cache_usage_perc{engine="0"} 0.1\n')

    async def completions(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        response = web.StreamResponse()
        await response.prepare(request)
        for count, reason in ((1, None), (2, "stop")):
            choice = {"index": 0, "text": "ok", "finish_reason": reason}
            event = {"choices": [choice], "usage": {"completion_tokens": count}}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_sampling_fields_reach_the_bus_and_a_vllm_worker_s_engine_request(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test the whole path of OpenAI's sampling fields and the chat default.

    An openai client sends a completion with ``stop``, ``temperature`` and ``seed``, and a
    chat with no limit and no sampling field, through the gateway in front of a stack whose
    worker is the ``vllm`` backend on a scripted server. The ingress carries the first as
    a ``Request`` whose ``sampling`` holds exactly those fields and the chat without one;
    the engine receives them by OpenAI's names (the chat greedy, capped at
    ``chat_default_max_tokens``); the client sees the engine's ``stop`` finish.
    """
    bodies: list[dict[str, Any]] = []
    published: list[Request] = []

    async def on_ingress(msg: Msg) -> None:
        published.append(decode(msg.data, Request))

    nc = await connect_nats(NatsSettings(url=nats_server.url), "test-ingress-tap")
    try:
        await nc.subscribe(Subjects(namespace).ingress_wildcard, cb=on_ingress)
        async with _recording_vllm(bodies) as vllm_url:
            worker = {"backend": "vllm", "vllm_url": vllm_url, "stats_period_s": 0.2}
            async with _gateway(nats_server, redis_server, namespace, worker=worker) as gateway:
                client = openai.AsyncOpenAI(
                    base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0
                )
                try:
                    done = await client.completions.create(
                        model="llama-3-8b",
                        prompt="Q: say hi\nA:",
                        max_tokens=8,
                        stop=["\nQ:", "###"],
                        temperature=0.3,
                        seed=7,
                    )
                    chat = await client.chat.completions.create(
                        model="llama-3-8b", messages=[{"role": "user", "content": "Say hi"}]
                    )
                finally:
                    await client.close()
    finally:
        await nc.close()
    assert (done.choices[0].finish_reason, done.usage.completion_tokens) == ("stop", 2)
    assert (chat.choices[0].finish_reason, chat.usage.completion_tokens) == ("stop", 2)
    by_prompt = {r.prompt: r for r in published}
    assert by_prompt["Q: say hi\nA:"].sampling == Sampling(
        temperature=0.3, stop=["\nQ:", "###"], seed=7
    )
    [chat_request] = [r for r in published if r.prompt != "Q: say hi\nA:"]
    assert (chat_request.sampling, chat_request.max_tokens) == (None, 1024)
    sent = {b["prompt"]: b for b in bodies}
    completion_body = sent["Q: say hi\nA:"]
    assert (completion_body["stop"], completion_body["temperature"]) == (["\nQ:", "###"], 0.3)
    assert (completion_body["seed"], completion_body["max_tokens"]) == (7, 8)
    assert "top_p" not in completion_body
    [chat_body] = [b for b in bodies if b is not completion_body]
    assert (chat_body["max_tokens"], chat_body["temperature"]) == (1024, 0.0)
    assert not {"stop", "seed", "top_p"} & set(chat_body)
