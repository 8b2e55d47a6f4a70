"""A stack of two models on real NATS and Redis: each model's requests run on its own workers.

Four workers serve two models (``greenserve up --models llama-3-8b,llama-2-13b`` deals them
out: workers 0 and 2 the first, 1 and 3 the second). Requests for each model, sent on the
bus and over HTTP, must complete on that model's workers only, counted per worker by the
client (``Completion.worker_id``) and by the workers themselves
(``greenserve_worker_completions_total``); ``GET /v1/models`` lists the two models; a model
no worker serves gets 404 ``model_not_found`` over HTTP and an ``ErrorReply`` with that code
on the bus.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, stack_launches
from loadgen.replay import replay
from loadgen.report import per_model
from loadgen.traces import TraceRequest
from proto.subjects import Subjects
from services.gateway.service import open_gateway
from shared.bus import connect_nats
from shared.config import GatewaySettings, NatsSettings
from shared.counters import ERRORS
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected

MODELS = ("llama-3-8b", "llama-2-13b")
UNSERVED = "llama-2-70b"
"""Accepted by the classifier's model list, but no worker serves it."""
SPEEDUP = 50.0
PER_MODEL = 40


def _completed_by(worker: str, model: str) -> float:
    value = REGISTRY.get_sample_value(
        "greenserve_worker_completions_total", {"worker": worker, "model": model}
    )
    return value or 0.0


async def _served_models(session: aiohttp.ClientSession, url: str) -> list[str]:
    """``GET /v1/models`` until it lists both models (heartbeats start within a period)."""
    deadline = time.monotonic() + 10.0
    while True:
        async with session.get(f"{url}/v1/models") as response:
            assert response.status == 200
            body = await response.json()
        assert body["object"] == "list"
        ids = [m["id"] for m in body["data"]]
        if len(ids) >= len(MODELS) or time.monotonic() > deadline:
            assert all(m["object"] == "model" for m in body["data"])
            return ids
        await asyncio.sleep(0.2)


async def _complete(
    session: aiohttp.ClientSession, url: str, model: str
) -> tuple[int, dict[str, Any]]:
    body = {
        "model": model,
        "prompt": "Say hi",
        "max_tokens": 4,
        "prompt_tokens": 16,
        "ignore_eos": True,
    }
    async with session.post(f"{url}/v1/completions", json=body) as response:
        return response.status, await response.json()


async def test_each_models_requests_complete_on_its_own_workers_and_an_unserved_model_is_404(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test the two-model stack: per-worker counts show each model's requests on its own
    workers only; /v1/models lists the two; an unserved model gets 404 model_not_found."""
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=4,
        models=MODELS,
        regions=("PJM",),
        speedup=SPEEDUP,
        origin_wall_s=time.time(),
        extra={"shutdown_timeout_s": 1.0},
    )
    launches = stack_launches(spec)
    workers_of = {
        model: {
            launch.settings.worker.worker_id
            for launch in launches
            if launch.module == "services.worker" and launch.settings.worker.model == model
        }
        for model in MODELS
    }
    assert workers_of == {MODELS[0]: {"worker-0", "worker-2"}, MODELS[1]: {"worker-1", "worker-3"}}
    # The counter is the process's: earlier tests' in-process workers of the same ids count
    # in it too, so every (worker, model) pair is measured from here.
    counted_before = {(w, m): _completed_by(w, m) for ws in workers_of.values() for w in ws
                      for m in MODELS}  # fmt: skip
    refused_before = ERRORS.labels("classifier", "model_not_found")._value.get()
    trace = [TraceRequest(t_s=0.05 * i, prompt_tokens=64, output_tokens=8) for i in range(80)]
    config = GatewaySettings(port=0, request_timeout_s=20.0)
    nc = await connect_nats(NatsSettings(url=nats_server.url), "test-two-models")
    try:
        async with (
            run_in_process(launches),
            open_gateway(launches[0].settings, config) as gateway,
            aiohttp.ClientSession() as session,
        ):
            listed = await _served_models(session, gateway.url)
            result = await replay(nc, Subjects(namespace), trace, model=MODELS, speedup=SPEEDUP)
            http = await asyncio.gather(*(_complete(session, gateway.url, m) for m in MODELS))
            unserved_http = await _complete(session, gateway.url, UNSERVED)
            unknown_http = await _complete(session, gateway.url, "gpt-99")
            async with session.get(f"{gateway.url}/v1/models/{UNSERVED}") as response:
                retrieve_status = response.status
            unserved_bus = await replay(
                nc, Subjects(namespace), trace[:3], model=UNSERVED, speedup=SPEEDUP
            )
    finally:
        await nc.close()

    assert sorted(listed) == sorted(MODELS)
    report = per_model(result.records)
    for model in MODELS:
        entry = report[model]
        assert entry["requests"] == PER_MODEL
        assert entry["completed"] == PER_MODEL, entry
        assert set(entry["workers"]) <= workers_of[model], entry
        # Both of the model's workers took some: placement spreads over the model's fleet.
        assert set(entry["workers"]) == workers_of[model], entry
    # The workers' own counts: each request on a worker of its model, none elsewhere.
    for model, workers in workers_of.items():
        by_worker = {w: _completed_by(w, model) - counted_before[w, model] for w in workers}
        # The bus requests plus the one HTTP request of the model.
        assert sum(by_worker.values()) == PER_MODEL + 1, by_worker
        for other in MODELS:
            if other != model:
                assert all(_completed_by(w, other) == counted_before[w, other] for w in workers)
    for model, (status, body) in zip(MODELS, http, strict=True):
        assert status == 200, body
        assert body["model"] == model
        assert body["usage"]["completion_tokens"] == 4

    status, body = unserved_http
    assert status == 404, body
    assert body["error"]["code"] == "model_not_found"
    assert body["error"]["type"] == "invalid_request_error"
    status, body = unknown_http
    assert (status, body["error"]["code"]) == (404, "model_not_found")
    assert retrieve_status == 404
    codes = [r.error.code for r in unserved_bus.records if r.error is not None]
    assert codes == ["model_not_found"] * 3
    # Three on the bus and one over HTTP, counted by the classifier that refused them.
    refused = ERRORS.labels("classifier", "model_not_found")._value.get() - refused_before
    assert refused == 4
