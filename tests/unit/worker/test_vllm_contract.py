"""The vllm backend against recorded responses of a current vLLM release (tests/vllm_replay.py).

Each test meets the bytes vLLM answers (tests/fixtures/vllm/<version>/README.md says where
each shape comes from): its SSE completion streams, its error events and bodies, its
``/metrics`` exposition, its ``/v1/models`` list and its request schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import msgspec

from proto.messages import Sampling
from services.worker.vllm_backend import VllmBackend
from services.worker.vllm_metrics import read_engine_metrics
from services.worker.vllm_protocol import DONE, TokenCounter, completion_body, parse_sse_line
from tests.unit.worker.helpers import RecordingSink, backend_on, classified
from tests.vllm_replay import VllmReplay, fixture, replaying, sse_events


@contextlib.asynccontextmanager
async def replay_backend(
    replay: VllmReplay, sink: RecordingSink, *, model: str = "llama-3-8b"
) -> AsyncIterator[VllmBackend]:
    """A started backend on a replaying server, running for the block."""
    async with replaying(replay) as url, backend_on(url, sink, model=model) as backend:
        yield backend


def _count(name: str) -> tuple[list[int], TokenCounter, bool]:
    """Tokens each event of a recorded stream adds, the counter, and whether DONE ended it."""
    counter = TokenCounter()
    per_event: list[int] = []
    done = False
    for event in sse_events(name):
        for line in event.splitlines():
            parsed = parse_sse_line(line)
            if parsed == DONE:
                done = True
            elif isinstance(parsed, dict):
                per_event.append(counter.update(parsed))
    return per_event, counter, done


def test_the_recorded_streams_count_exactly_with_their_finish_reasons() -> None:
    """Test the token counter on each recorded stream: per-chunk usage (one token a chunk,
    several with --stream-interval), and a chat stream whose opening role chunk carries no
    token and whose final usage chunk tops the count up to the end-of-sequence token."""
    per_event, counter, done = _count("completions_stream.sse")
    assert (per_event, counter.counted, counter.finish_reason, done) == (
        [1, 1, 1, 1, 0],
        4,
        "length",
        True,
    )
    per_event, counter, done = _count("completions_stream_options.sse")
    assert (per_event, counter.counted, counter.finish_reason) == ([2, 2, 1, 0], 5, "length")
    per_event, counter, done = _count("chat_completions_stream.sse")
    assert (per_event, counter.counted, counter.finish_reason) == (
        [0, 1, 1, 1, 1, 1, 1, 0],
        6,
        "stop",
    )
    usage = json.loads(fixture("chat_completions_stream.sse").split("data: ")[-2])["usage"]
    assert usage["completion_tokens"] == counter.counted


async def test_a_recorded_stream_reaches_the_worker_token_by_token_and_finishes() -> None:
    """Test the backend end to end on the recorded completion streams: the served model
    learnt from /v1/models, every token emitted, the finish reason passed on, the
    keep-alive comment skipped."""
    for name, tokens in (("completions_stream.sse", 4), ("completions_stream_options.sse", 5)):
        replay = VllmReplay(completions=name)
        sink = RecordingSink()
        async with replay_backend(replay, sink, model="llama-2-13b") as backend:
            assert backend.served_model == "llama-3-8b"
            backend.submit(classified("r", max_tokens=tokens))
            await asyncio.wait_for(sink.ended.wait(), 5.0)
        assert sink.failures == []
        assert sink.tokens("r") == tokens
        assert [b.finish_reasons for b in sink.batches if b.finished] == [{"r": "length"}]
        assert replay.requests[0]["model"] == "llama-3-8b"


async def test_the_recorded_error_event_and_body_fail_the_request_with_vllms_message() -> None:
    """Test that the error event vLLM streams mid-way (a GenerationError) ends the request
    with engine_error, and its 400 body with engine_rejected, each with vLLM's message."""
    sink = RecordingSink(expected=2)
    replay = VllmReplay(completions="completions_stream_error.sse", rejected=frozenset({13}))
    async with replay_backend(replay, sink) as backend:
        backend.submit(classified("broken", max_tokens=4))
        backend.submit(classified("too-long", max_tokens=13))
        await asyncio.wait_for(sink.ended.wait(), 5.0)
    failures = {rid: (code, reason) for rid, code, reason in sink.failures}
    assert failures["broken"] == ("engine_error", "Internal server error")
    code, reason = failures["too-long"]
    assert code == "engine_rejected"
    assert reason.startswith("HTTP 400: ")
    assert "maximum context length is 8192" in reason
    assert sink.finished() == []


async def test_a_cancelled_request_closes_the_connection_the_server_streams_on() -> None:
    """Test the abort contract: vLLM aborts a request when its client's connection closes,
    so a cancel must close it; the server sees the close, and the backend reports neither a
    failure nor a finish for the request."""
    replay = VllmReplay(hold_after=2)
    sink = RecordingSink()
    async with replay_backend(replay, sink) as backend:
        backend.submit(classified("long", max_tokens=4))
        await asyncio.wait_for(replay.holding.wait(), 5.0)
        for _ in range(100):
            if sink.tokens("long") == 2:
                break
            await asyncio.sleep(0.01)
        assert not replay.disconnected.is_set()
        backend.abort("long")
        await asyncio.wait_for(replay.disconnected.wait(), 5.0)
    assert sink.tokens("long") == 2
    assert sink.failures == []
    assert sink.finished() == []


async def test_the_recorded_metrics_fill_the_snapshot() -> None:
    """Test that running and waiting requests, KV use and the block count and size come
    from the recorded /metrics exposition (vllm: names of the release)."""
    metrics = read_engine_metrics(fixture("metrics.txt"))
    assert (metrics.running, metrics.waiting) == (12, 3)
    assert metrics.kv_usage == 0.4125
    assert (metrics.kv_blocks_total, metrics.block_size) == (6875, 64)
    assert metrics.generation_tokens == 91877.0
    assert not metrics.clock_control
    async with replay_backend(VllmReplay(), RecordingSink()) as backend:
        snap = backend.snapshot()
    assert (snap.running, snap.waiting) == (12, 3)
    assert (snap.kv_blocks_total, snap.kv_blocks_used, snap.kv_block_size) == (6875, 2836, 64)


def test_every_field_the_backend_sends_is_one_vllm_reads() -> None:
    """Test the request against the release's CompletionRequest: vLLM accepts unknown fields
    with only a log line, so a field it renamed would silently stop working."""
    recorded = json.loads(fixture("request_fields.json"))
    sampling = Sampling(
        temperature=0.7, top_p=0.9, stop=["\n"], seed=1, presence_penalty=0.1, frequency_penalty=0.2
    )
    request = classified("r")
    request = msgspec.structs.replace(
        request, request=msgspec.structs.replace(request.request, sampling=sampling)
    )
    body = completion_body(request, "llama-3-8b")
    assert set(msgspec.structs.asdict(sampling)) <= set(body)
    assert set(body) <= set(recorded["CompletionRequest"])
    assert set(body["stream_options"]) <= set(recorded["StreamOptions"])
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
