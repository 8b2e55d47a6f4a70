"""One trace per request, exported over OTLP/HTTP to a real receiver on loopback.

The OpenTelemetry tracer provider is process-global and can be set only once, so the stack
(every service in one event loop, plus the gateway) runs in a child process started by
this test: its first service installs the provider that exports to our receiver, whatever
other tests of this pytest process did with theirs. In one process all services share
that provider's resource, so each span's *instrumentation scope* (``greenserve.<service>``)
says which service made it. The receiver decodes the protobuf bodies with
``ExportTraceServiceRequest``; the test checks the span tree of each request.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from services.planner.plan_model import PlanStatus
from shared.servers import ServerProcess

trace_service_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

pytestmark = pytest.mark.connected

REPO = Path(__file__).resolve().parents[2]
REQUESTS = 3
SERVER_KIND = 2  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_SERVER
ERROR_STATUS = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
STANDALONE_ROOTS = frozenset({"set_clock", "plan_epoch"})
"""Work of no request (a clock change, a planner solve): each its own trace by design."""


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One decoded span: ids in hex, the scope that made it, its string attributes."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    scope: str
    kind: int
    attributes: dict[str, str]
    links: tuple[tuple[str, str], ...] = ()
    """(trace id, span id) of each span it links to."""
    status: int = 0
    """``Status.code``: 0 unset, 1 ok, 2 error."""
    status_message: str = ""


async def _receiver(spans: list[ReceivedSpan]) -> tuple[web.AppRunner, str]:
    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attrs = {a.key: a.value.string_value for a in span.attributes}
                    spans.append(
                        ReceivedSpan(
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.name,
                            scope_spans.scope.name,
                            span.kind,
                            attrs,
                            tuple((k.trace_id.hex(), k.span_id.hex()) for k in span.links),
                            span.status.code,
                            span.status.message,
                        )
                    )
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/v1/traces"


@pytest.mark.parametrize("colocate", [False, True], ids=["separate", "colocated"])
async def test_each_request_is_one_trace_from_http_ingress_to_generate(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str, colocate: bool
) -> None:
    """Test that gateway → classify → scheduler → dispatch → worker → generate share a trace."""
    spans: list[ReceivedSpan] = []
    runner, endpoint = await _receiver(spans)
    try:
        args = json.dumps([nats_server.url, redis_server.url, namespace, endpoint, colocate])
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.test_tracing",
            args,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(child.communicate(), 90)
    finally:
        await runner.cleanup()
    assert child.returncode == 0, err.decode()[-3000:]
    request_ids, cancelled_id = json.loads(out.decode().strip().splitlines()[-1])
    roots = [s for s in spans if s.attributes.get("request.id") in request_ids and not s.parent_id]
    assert sorted(s.attributes["request.id"] for s in roots) == sorted(request_ids)
    assert len({s.trace_id for s in roots}) == REQUESTS
    for request_id in [*request_ids, cancelled_id]:  # exactly one trace holds each request
        assert len({s.trace_id for s in spans if s.attributes.get("request.id") == request_id}) == 1
    for root in roots:
        _check_tree(root, [s for s in spans if s.trace_id == root.trace_id])
    _check_no_orphans(spans, {root.trace_id for root in roots}, cancelled_id, colocate)
    _check_cancelled(spans, cancelled_id)
    # Clock changes are traced too, each its own trace, by the node's dvfs agent.
    clocks = [s for s in spans if s.name == "set_clock"]
    assert clocks, sorted({s.name for s in spans})
    assert all(s.scope.startswith("greenserve.dvfs") and not s.parent_id for s in clocks)
    assert {s.attributes["worker.id"] for s in clocks} == {"worker-0"}
    # The co-located child runs the MILP planner: each solve is a root span of its own.
    solves = [s for s in spans if s.name == "plan_epoch"]
    if colocate:
        assert solves, sorted({s.name for s in spans})
        assert all(s.scope == "greenserve.planner" and not s.parent_id for s in solves)
        assert {s.attributes["planner.status"] for s in solves} <= {str(v) for v in PlanStatus}
    else:
        assert not solves  # the static planner solves nothing


def _check_no_orphans(
    spans: list[ReceivedSpan], request_traces: set[str], cancelled_id: str, colocate: bool
) -> None:
    """Every span is in a request's trace or under a standalone root, every parent arrived,
    and the batches that moved requests between processes joined and linked their traces
    instead of starting traces of their own."""
    (cancelled_root,) = [
        s for s in spans if s.attributes.get("request.id") == cancelled_id and not s.parent_id
    ]
    request_traces = {*request_traces, cancelled_root.trace_id}
    # Co-located, the test sends further requests while it waits for a MILP plan: any trace
    # rooted in the gateway's SERVER span is a request's.
    all_requests = {
        s.trace_id
        for s in spans
        if not s.parent_id and s.scope == "greenserve.gateway" and s.kind == SERVER_KIND
    }
    assert request_traces <= all_requests
    by_id = {s.span_id: s for s in spans}
    roots = [s for s in spans if not s.parent_id]
    assert all(s.parent_id in by_id for s in spans if s.parent_id), [
        s.name for s in spans if s.parent_id and s.parent_id not in by_id
    ]
    assert all(s.name in STANDALONE_ROOTS for s in roots if s.trace_id not in all_requests), sorted(
        s.name for s in roots if s.trace_id not in all_requests
    )
    assert {s.name for s in spans if s.name.startswith("scheduler ")} <= {
        "scheduler SubmitBatch",
        "scheduler PullRequest",
        "scheduler RequeueRequest",
    }
    if colocate:
        return  # submit and pull are method calls in one process: no batch message
    for batch in ("scheduler SubmitBatch", "scheduler PullRequest"):
        moved = [s for s in spans if s.name == batch]
        assert moved, f"no {batch} span"
        # Each batch is in one request's trace and links to every other one it carried.
        reached = {s.trace_id for s in moved} | {t for s in moved for t, _ in s.links}
        assert request_traces <= reached <= all_requests, (batch, reached, request_traces)
        for span in moved:
            assert span.parent_id in by_id
            assert all(t != span.trace_id for t, _ in span.links)


def _check_cancelled(spans: list[ReceivedSpan], cancelled_id: str) -> None:
    """The request whose client left mid-stream: its gateway span and its generate span
    failed, each saying why."""
    (root,) = [
        s for s in spans if s.attributes.get("request.id") == cancelled_id and not s.parent_id
    ]
    assert (root.status, root.status_message) == (
        ERROR_STATUS,
        "cancelled: the client disconnected",
    )
    in_trace = [s for s in spans if s.trace_id == root.trace_id]
    generate = [s for s in in_trace if s.name == "generate"]
    assert generate, sorted(s.name for s in in_trace)
    assert all(s.status == ERROR_STATUS for s in generate)
    assert all(s.status_message.startswith("cancelled: ") for s in generate)
    assert all(s.attributes["error.type"] == "cancelled" for s in generate)
    finished = [s for s in spans if s.name == "generate" and s.trace_id != root.trace_id]
    assert finished
    assert all(s.status != ERROR_STATUS for s in finished)


def _check_tree(root: ReceivedSpan, in_trace: list[ReceivedSpan]) -> None:
    by_id = {s.span_id: s for s in in_trace}

    def of(service: str) -> list[ReceivedSpan]:
        # A service's own tracer is named after its process (``greenserve.worker-0``).
        return [s for s in in_trace if s.scope.startswith(f"greenserve.{service}")]

    def ids(spans: list[ReceivedSpan]) -> set[str]:
        return {s.span_id for s in spans}

    assert (root.name, root.scope, root.kind) == (
        "POST /v1/completions",
        "greenserve.gateway",
        SERVER_KIND,
    )
    (classify,) = of("classifier")
    assert (classify.name, classify.parent_id) == ("classify", root.span_id)
    scheduler, router, worker = of("scheduler"), of("router"), of("worker")
    assert scheduler
    assert {s.parent_id for s in scheduler} == {classify.span_id}
    # The context travels in ClassifiedRequest.trace, written inside the classify span, so
    # the router's dispatch continues from classify, not from the scheduler's span.
    assert router
    assert {s.parent_id for s in router} == {classify.span_id}
    (generate,) = [s for s in worker if s.name == "generate"]
    accept = by_id[generate.parent_id]
    assert accept in worker
    assert accept.parent_id in ids(router)
    assert generate.attributes == {
        **generate.attributes,
        "request.id": root.attributes["request.id"],
    }
    assert all(s.parent_id in by_id for s in in_trace if s is not root)


# --- the child process: stack + gateway with OTLP export, a few requests, flush ---------


async def _child(
    nats_url: str, redis_url: str, namespace: str, endpoint: str, colocate: bool
) -> tuple[list[str], str]:
    from opentelemetry import trace

    from greenserve.runner import run_in_process
    from greenserve.stack import StackSpec, stack_launches
    from services.gateway.service import open_gateway
    from shared.config import GatewaySettings

    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_url,
        redis_url=redis_url,
        workers=1,
        regions=("PJM",),
        speedup=50.0,
        origin_wall_s=time.time(),
        extra={
            "telemetry": {"otlp_endpoint": endpoint},
            "shutdown_timeout_s": 1.0,
            # A fixed clock below the maximum: the dvfs agent sets it once, a clock-change span.
            "dvfs": {"mode": "fixed", "clock_mhz": 1200.0},
            # Co-located, the planner solves the MILP (epochs of 1.2 s wall): a solver span.
            # Without the mixed-class measurement at start-up: the first solve sooner.
            **(
                {
                    "planner": {
                        "mode": "milp",
                        "epoch_s": 60.0,
                        "republish_wall_s": 0.25,
                        "mixed_capacity": False,
                    }
                }
                if colocate
                else {}
            ),
        },
        colocate_request_path=colocate,
    )
    launches = stack_launches(spec)
    body: dict[str, Any] = {
        "model": spec.model,
        "prompt": "Say hi",
        "max_tokens": 4,
        "prompt_tokens": 16,
        "ignore_eos": True,
    }
    async with run_in_process(launches):
        async with (
            open_gateway(launches[0].settings, GatewaySettings(port=0)) as gateway,
            aiohttp.ClientSession() as session,
        ):

            async def one() -> str:
                url = f"{gateway.url}/v1/completions"
                async with session.post(url, json=body) as response:
                    response.raise_for_status()
                    return str((await response.json())["id"]).removeprefix("cmpl-")

            ids = list(await asyncio.gather(*(one() for _ in range(REQUESTS))))
            cancelled = await _leave_mid_stream(gateway.url, {**body, "max_tokens": 8000})
            if colocate:
                # The first MILP solve needs start-up profiles and a step of demand.
                await _milp_plan_reaches(redis_url, namespace, one)
        await _clock_reaches(redis_url, namespace, "worker-0", 1200.0)
        provider = trace.get_tracer_provider()
        assert provider.force_flush(10_000)  # type: ignore[attr-defined]
    return ids, cancelled


async def _leave_mid_stream(gateway_url: str, body: dict[str, Any]) -> str:
    """Stream a request that would run for seconds, leave after its first token; its id."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{gateway_url}/v1/completions", json={**body, "stream": True}) as response,
    ):
        response.raise_for_status()
        async for line in response.content:
            if line.startswith(b"data: {"):
                request_id = str(json.loads(line[6:])["id"]).removeprefix("cmpl-")
                break
        else:
            raise AssertionError("the stream ended before its first token")
    # Leaving the block closed the connection: the gateway cancels the request; give the
    # cancel time to reach the worker, which ends it and records its spans.
    await asyncio.sleep(1.0)
    return request_id


async def _milp_plan_reaches(
    redis_url: str, namespace: str, request: Callable[[], Awaitable[str]]
) -> None:
    """Send a request every 0.2 s until the stored plan is a solved one (at most 60 s)."""
    from proto.codec import decode
    from proto.keys import Keys
    from proto.messages import Plan

    await _until_stored(
        redis_url,
        Keys(namespace).plan,
        lambda raw: decode(raw, Plan).objective not in ("static", "bootstrap"),
        "the planner never published a MILP plan",
        timeout_s=60.0,
        every_s=0.2,
        between=request,
    )


async def _clock_reaches(redis_url: str, namespace: str, worker_id: str, mhz: float) -> None:
    """Wait (at most 20 s) until the worker's registered stats show the dvfs agent's clock."""
    from proto.codec import decode
    from proto.keys import Keys
    from proto.messages import WorkerStats

    await _until_stored(
        redis_url,
        Keys(namespace).worker(worker_id),
        lambda raw: abs(decode(raw, WorkerStats).clock_mhz - mhz) < 1.0,
        f"{worker_id} never ran at {mhz} MHz",
        timeout_s=20.0,
        every_s=0.1,
    )


async def _until_stored(
    redis_url: str,
    key: str,
    accept: Callable[[bytes], bool],
    failure: str,
    *,
    timeout_s: float,
    every_s: float,
    between: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Poll ``key`` until ``accept`` takes its value, awaiting ``between`` after each miss."""
    from redis.asyncio import Redis

    from shared.store import as_bytes

    redis = Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            raw = await redis.get(key)
            if raw is not None and accept(as_bytes(raw)):
                return
            if between is not None:
                await between()
            await asyncio.sleep(every_s)
    finally:
        await redis.aclose()
    raise TimeoutError(failure)


if __name__ == "__main__":
    nats_url, redis_url, namespace, endpoint, colocate = json.loads(sys.argv[1])
    print(json.dumps(asyncio.run(_child(nats_url, redis_url, namespace, endpoint, colocate))))
