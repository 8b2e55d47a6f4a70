"""Answering a published request from the replies on its subject: one JSON body or SSE.

Replies arrive on the request's queue (:class:`~.replies.ReplyRouter`): ``TokenChunk`` →
text, ``Completion`` → the end, ``ErrorReply`` → an OpenAI error with the status of
:mod:`.errors`. A non-streaming request is answered once, at its completion. A streaming
one gets ``text/event-stream``: one chunk per token text, the finish reason, usage when
asked for, then ``[DONE]``; an error after the headers went out travels as an SSE event.
Every reply waits at most ``gateway.request_timeout_s``; the :class:`~.flight.Flight` notes
what was seen, so the route cancels a request left without its final reply.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from aiohttp import web
from opentelemetry import trace

from proto.messages import Completion, ErrorReply, TokenChunk
from services.gateway.errors import ApiError
from services.gateway.flight import Flight
from services.gateway.footprint import observe_footprint
from services.gateway.openai_schema import (
    ParsedRequest,
    completion_body,
    footprint_headers,
    stream_chunk,
    usage,
)
from services.gateway.replies import TokenText
from services.gateway.state import NAME, STREAMING, GatewayState
from shared.counters import ERRORS

__all__ = ["answer", "sse"]

_json = msgspec.json.Encoder()


def sse(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event carrying ``payload`` (JSON, or a literal such as ``[DONE]``)."""
    data = payload.encode() if isinstance(payload, str) else _json.encode(payload)
    return b"data: " + data + b"\n\n"


async def _next_reply(
    state: GatewayState, queue: asyncio.Queue[msgspec.Struct], flight: Flight
) -> msgspec.Struct:
    try:
        reply = await asyncio.wait_for(queue.get(), state.config.request_timeout_s)
    except TimeoutError:
        flight.timed_out = True
        trace.get_current_span().set_status(trace.StatusCode.ERROR, "timeout: no reply in time")
        raise ApiError("timeout", f"no reply within {state.config.request_timeout_s} s") from None
    flight.saw(reply)
    return reply


def _upstream(error: ErrorReply, state: GatewayState) -> ApiError:
    """The client's error for a service's; a 429 (the scheduler's ``overloaded``: its pool's
    queue was full or the request waited past its bound) carries ``Retry-After`` as the
    gateway's own does, so clients back off the same way whichever ceiling they hit."""
    # The stack ended the request with an error (cancelled, unavailable ...): the request's
    # SERVER span failed, whatever HTTP status (or SSE event) carries it to the client.
    span = trace.get_current_span()
    span.set_attribute("error.type", error.code)
    span.set_status(trace.StatusCode.ERROR, f"{error.code}: {error.service}: {error.reason}")
    err = ApiError(error.code, f"{error.service}: {error.reason}")
    if err.status == 429:
        err.retry_after_s = state.config.overload_retry_after_s
    return err


async def answer(
    request: web.Request,
    state: GatewayState,
    parsed: ParsedRequest,
    flight: Flight,
    queue: asyncio.Queue[msgspec.Struct],
) -> web.StreamResponse:
    """The HTTP answer to a published request, from its replies on ``queue``."""
    request_id = flight.request_id
    created = int(time.time())
    tokens = TokenText(state.config.placeholder_token)
    # Errors before any token stay plain HTTP errors.
    first = await _next_reply(state, queue, flight)
    if isinstance(first, ErrorReply):
        raise _upstream(first, state)
    if not parsed.stream:
        reply = first
        while not isinstance(reply, Completion):
            if isinstance(reply, ErrorReply):
                raise _upstream(reply, state)
            if isinstance(reply, TokenChunk):
                tokens.add(reply)
            reply = await _next_reply(state, queue, flight)
        tokens.finish(reply.output_tokens)
        body = completion_body(
            parsed,
            request_id,
            created,
            tokens.text,
            reply.finish_reason,
            usage(reply.input_tokens, reply.output_tokens, reply.energy_j, reply.co2_g),
        )
        observe_footprint(reply.energy_j, reply.co2_g)
        return web.json_response(body, headers=footprint_headers(reply.energy_j, reply.co2_g))
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    request[STREAMING] = True
    if parsed.endpoint == "chat":
        await response.write(sse(stream_chunk(parsed, request_id, created, text="", role=True)))
    reply = first
    try:
        while not isinstance(reply, Completion):
            if isinstance(reply, ErrorReply):
                raise _upstream(reply, state)
            if isinstance(reply, TokenChunk) and (text := tokens.add(reply)):
                await response.write(sse(stream_chunk(parsed, request_id, created, text=text)))
            reply = await _next_reply(state, queue, flight)
    except ApiError as err:  # headers are gone: the error travels as an SSE event
        ERRORS.labels(NAME, err.code).inc()
        await response.write(sse(err.body()))
        await response.write(sse("[DONE]"))
        return response
    rest = tokens.finish(reply.output_tokens)
    await response.write(
        sse(stream_chunk(parsed, request_id, created, text=rest, finish_reason=reply.finish_reason))
    )
    observe_footprint(reply.energy_j, reply.co2_g)
    if parsed.include_usage:
        final = usage(reply.input_tokens, reply.output_tokens, reply.energy_j, reply.co2_g)
        await response.write(
            sse(stream_chunk(parsed, request_id, created, text=None, token_usage=final))
        )
    await response.write(sse("[DONE]"))
    return response
