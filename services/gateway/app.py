"""The aiohttp application: OpenAI routes, SSE streaming, tracing and error middleware.

A request is validated once (:mod:`services.gateway.openai_schema`), published to the
ingress stream with ``Nats-Msg-Id`` (a retried publish is not a second request), the
reply subject in ``Gs-Reply`` and the trace context, and answered from the replies that
arrive on this gateway's client subject: ``TokenChunk`` → text, ``Completion`` → end,
``ErrorReply`` → an OpenAI error with the status of :mod:`services.gateway.errors`. It
publishes on its own ``ingress.client.<client id>``; on a secured stack the client id is
its NATS user, the only one the server lets it publish and read as. A published request
whose handler ends without its final reply (the client disconnected, the gateway timed out)
is cancelled (:mod:`services.gateway.flight`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
import redis.exceptions
from aiohttp import web
from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry import propagate, trace
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest
from redis.asyncio import Redis

from proto.codec import decode, encode
from proto.keys import Keys
from proto.messages import Completion, ErrorReply, Forecast, TokenChunk, scoped_request_id
from proto.subjects import Subjects
from services.gateway.carbon_aware import emissions_forecast, parse_forecast_query
from services.gateway.cells import Cell, CellPicker
from services.gateway.errors import ApiError
from services.gateway.flight import Flight, cancel_unanswered
from services.gateway.openai_schema import (
    Endpoint,
    ParsedRequest,
    completion_body,
    parse_body,
    stream_chunk,
    to_request,
    usage,
)
from services.gateway.replies import ReplyRouter, TokenText
from shared.cancels import send_cancel
from shared.config import GatewaySettings
from shared.counters import ERRORS
from shared.security.client_ids import instance_token
from shared.store import as_bytes
from shared.telemetry import inject_headers

__all__ = [
    "CELL_REQUESTS",
    "HTTP_REQUESTS",
    "NAME",
    "REPLY_HEADER",
    "STATE",
    "GatewayState",
    "build_app",
]

NAME = "gateway"
REPLY_HEADER = "Gs-Reply"
"""The classifier answers an undecodable payload on this header's subject."""

HTTP_REQUESTS: Counter = Counter(
    "greenserve_http_requests_total", "HTTP requests to the gateway", ["route", "status"]
)
CELL_REQUESTS: Counter = Counter(
    "greenserve_gateway_cell_requests_total",
    "Requests the gateway stored in each cell's ingress stream",
    ["cell"],
)

logger = logging.getLogger(__name__)

_json = msgspec.json.Encoder()


@dataclass(slots=True)
class GatewayState:
    """What the handlers share: the bus, the config and the reply router."""

    nc: Client
    js: JetStreamContext
    subjects: Subjects
    config: GatewaySettings
    models: frozenset[str]
    client_id: str
    chars_per_token: float | None
    """Prompt-length estimate; ``None`` when the classifier tokenises the text itself."""
    context_tokens: int | None
    """The classifier's context; a default output limit is cut to fit it."""
    cells: CellPicker
    """The cells this gateway sends requests to (its own stack alone unless configured)."""
    router: ReplyRouter = field(default_factory=ReplyRouter)
    store: Redis | None = None
    """Where the forecaster keeps its latest forecasts (the carbon-aware query reads them)."""
    keys: Keys | None = None
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _instance: str = field(default_factory=instance_token)
    """Gateway replicas share their identity's client id; this keeps their ids apart."""

    def new_request_id(self) -> str:
        """A request id unique to this gateway instance."""
        return f"{self.client_id[:64]}-{self._instance}-{next(self._ids)}"


STATE: web.AppKey[GatewayState] = web.AppKey("state", GatewayState)
STREAMING: web.RequestKey[bool] = web.RequestKey("streaming", bool)
"""Set once a response's headers are sent: from then on an error can only be an SSE event."""


def _error_response(err: ApiError) -> web.Response:
    ERRORS.labels(NAME, err.code).inc()
    return web.json_response(err.body(), status=err.status)


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else _json.encode(payload)
    return b"data: " + data + b"\n\n"


@web.middleware
async def _observe(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """One SERVER span per HTTP request (continuing a client's traceparent); JSON 404/405."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    tracer = trace.get_tracer(f"greenserve.{NAME}")
    with tracer.start_as_current_span(
        f"{request.method} {route}",
        context=propagate.extract(dict(request.headers)),
        kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": request.method, "url.path": request.path},
    ) as span:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            code = "not_found" if exc.status == 404 else "method_not_allowed"
            response = _error_response(ApiError(code, exc.reason, status=exc.status))
            if "Allow" in exc.headers:  # a 405 says which methods the route has
                response.headers["Allow"] = exc.headers["Allow"]
        except ConnectionResetError:
            raise  # the client is gone: there is no one to answer
        except Exception as exc:
            if request.get(STREAMING):
                raise  # headers are out; a second response would corrupt the stream
            # A bug must still reach an OpenAI client as its error shape, not aiohttp's text.
            logger.exception("%s %s failed", request.method, request.path)
            span.record_exception(exc)
            response = _error_response(
                ApiError("internal", "the gateway failed to answer this request", status=500)
            )
        span.set_attribute("http.response.status_code", response.status)
        if response.status >= 500:
            span.set_status(trace.StatusCode.ERROR)
    HTTP_REQUESTS.labels(route, str(response.status)).inc()
    return response


async def _read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise ApiError("body_too_large", f"body of {request.content_length} bytes > {limit}")
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError("body_too_large", f"body larger than {limit} bytes") from None


async def _publish(state: GatewayState, parsed: ParsedRequest, request_id: str) -> Cell:
    """Store the request in a cell's ingress stream; the cell it went to, counted in flight.

    A cell whose stream does not answer (no responders: it is down or not started) is
    skipped and the next one tried; any other failure may have stored the request, so it
    is answered 503 rather than sent to a second cell, which could answer it twice.
    """
    tried: list[Cell] = []
    while (cell := state.cells.pick(time.monotonic(), exclude=tried)) is not None:
        try:
            await _publish_to(state, cell.subjects, parsed, request_id)
        except nats.js.errors.NoStreamResponseError:
            state.cells.release(cell)
            state.cells.mark_down(cell, time.monotonic())
            tried.append(cell)
            logger.warning("cell %s has no ingress stream; trying another", cell.subjects.prefix)
            continue
        except BaseException:
            state.cells.release(cell)
            raise
        CELL_REQUESTS.labels(cell.subjects.prefix).inc()
        return cell
    raise ApiError("unavailable", "no cell's ingress is available; retry later")


async def _publish_to(
    state: GatewayState, subjects: Subjects, parsed: ParsedRequest, request_id: str
) -> None:
    # A cell answers only within its own reply space, so the reply subject is that cell's.
    reply = subjects.client_reply(state.client_id, request_id)
    message = to_request(
        parsed,
        request_id=request_id,
        reply_subject=reply,
        client_id=state.client_id,
        sent_at=time.time(),
        chars_per_token=state.chars_per_token,
        context_tokens=state.context_tokens,
    )
    # The stream's de-duplication spans all clients: scope the id as the stack does.
    msg_id = scoped_request_id(state.client_id, request_id)
    headers = inject_headers({"Nats-Msg-Id": msg_id, REPLY_HEADER: reply})
    try:
        await state.js.publish(
            subjects.ingress_client(state.client_id),
            encode(message),
            timeout=state.config.publish_timeout_s,
            headers=headers,
        )
    except nats.js.errors.NoStreamResponseError:
        raise
    except nats.errors.MaxPayloadError:
        raise ApiError("body_too_large", "request exceeds the bus's largest message") from None
    except (nats.errors.Error, TimeoutError, asyncio.CancelledError) as exc:
        # The stream may have stored it although the publish failed (its acknowledgement
        # was lost): cancel it, or it runs for nobody while the client retries under a new id.
        await send_cancel(state.nc, subjects, state.client_id, request_id, "publish failed")
        if isinstance(exc, asyncio.CancelledError):
            raise
        logger.warning("ingress publish of %s failed: %r", request_id, exc)
        raise ApiError("unavailable", "the ingress is unavailable; retry later") from None


async def _next_reply(
    state: GatewayState, queue: asyncio.Queue[msgspec.Struct], flight: Flight
) -> msgspec.Struct:
    try:
        reply = await asyncio.wait_for(queue.get(), state.config.request_timeout_s)
    except TimeoutError:
        flight.timed_out = True
        raise ApiError("timeout", f"no reply within {state.config.request_timeout_s} s") from None
    flight.saw(reply)
    return reply


def _upstream(error: ErrorReply) -> ApiError:
    return ApiError(error.code, f"{error.service}: {error.reason}")


async def _answer(
    request: web.Request,
    state: GatewayState,
    parsed: ParsedRequest,
    flight: Flight,
    queue: asyncio.Queue[msgspec.Struct],
) -> web.StreamResponse:
    request_id = flight.request_id
    created = int(time.time())
    tokens = TokenText(state.config.placeholder_token)
    # Errors before any token stay plain HTTP errors.
    first = await _next_reply(state, queue, flight)
    if isinstance(first, ErrorReply):
        raise _upstream(first)
    if not parsed.stream:
        reply = first
        while not isinstance(reply, Completion):
            if isinstance(reply, ErrorReply):
                raise _upstream(reply)
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
            usage(reply.input_tokens, reply.output_tokens),
        )
        return web.json_response(body)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    request[STREAMING] = True
    if parsed.endpoint == "chat":
        await response.write(_sse(stream_chunk(parsed, request_id, created, text="", role=True)))
    reply = first
    try:
        while not isinstance(reply, Completion):
            if isinstance(reply, ErrorReply):
                raise _upstream(reply)
            if isinstance(reply, TokenChunk) and (text := tokens.add(reply)):
                await response.write(_sse(stream_chunk(parsed, request_id, created, text=text)))
            reply = await _next_reply(state, queue, flight)
    except ApiError as err:  # headers are gone: the error travels as an SSE event
        ERRORS.labels(NAME, err.code).inc()
        await response.write(_sse(err.body()))
        await response.write(_sse("[DONE]"))
        return response
    rest = tokens.finish(reply.output_tokens)
    await response.write(
        _sse(
            stream_chunk(parsed, request_id, created, text=rest, finish_reason=reply.finish_reason)
        )
    )
    if parsed.include_usage:
        final = usage(reply.input_tokens, reply.output_tokens)
        await response.write(
            _sse(stream_chunk(parsed, request_id, created, text=None, token_usage=final))
        )
    await response.write(_sse("[DONE]"))
    return response


def _handler(endpoint: Endpoint) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        request_id = state.new_request_id()
        trace.get_current_span().set_attribute("request.id", request_id)
        queue = state.router.open(request_id)
        cell: Cell | None = None
        flight: Flight | None = None
        try:
            raw = await _read_body(request, state.config.max_body_bytes)
            parsed = parse_body(
                raw,
                endpoint,
                models=state.models,
                default_max_tokens=state.config.default_max_tokens,
                chat_default_max_tokens=state.config.chat_default_max_tokens,
                max_tokens_limit=state.config.max_tokens_limit,
            )
            cell = await _publish(state, parsed, request_id)
            flight = Flight(cell.subjects, request_id)
            return await _answer(request, state, parsed, flight, queue)
        except ApiError as err:
            return _error_response(err)
        except (ConnectionResetError, asyncio.CancelledError):
            # The client left: mid-stream (a write failed) or while the handler waited
            # (aiohttp cancels the handler on a disconnect); the finally cancels the request.
            logger.info("client of %s disconnected", request_id)
            raise
        finally:
            state.router.close(request_id)
            if cell is not None:
                state.cells.release(cell)
            await cancel_unanswered(state.nc, state.client_id, flight)

    return handle


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "greenserve"}


async def _models(request: web.Request) -> web.Response:
    models = sorted(request.app[STATE].models)
    return web.json_response({"object": "list", "data": [_model(m) for m in models]})


async def _retrieve_model(request: web.Request) -> web.Response:
    """OpenAI's ``GET /v1/models/{model}`` (the client's ``models.retrieve``)."""
    model_id = request.match_info["model"]
    if model_id not in request.app[STATE].models:
        err = ApiError("model_not_found", f"the model {model_id!r} does not exist", param="model")
        return _error_response(err)
    return web.json_response(_model(model_id))


async def _health(request: web.Request) -> web.Response:
    if request.app[STATE].nc.is_connected:
        return web.json_response({"status": "ok"})
    return web.json_response({"status": "nats disconnected"}, status=503)


async def _emissions_forecasts(request: web.Request) -> web.Response:
    """The carbon-aware-sdk's ``/emissions/forecasts/current`` (:mod:`.carbon_aware`)."""
    try:
        body = await _forecasts_body(request)
    except ApiError as err:
        return _error_response(err)
    return web.json_response(body)


async def _forecasts_body(request: web.Request) -> list[dict[str, Any]]:
    state = request.app[STATE]
    query = parse_forecast_query(request.query, request.query.getall("location", []))
    if state.store is None or state.keys is None:
        raise ApiError("unavailable", "this gateway has no store to read forecasts from")
    try:
        raws = await state.store.mget([state.keys.forecast(loc) for loc in query.locations])
    except (redis.exceptions.RedisError, OSError) as exc:
        raise ApiError("unavailable", f"the forecast store is unreachable: {exc}") from None
    found = {loc: raw for loc, raw in zip(query.locations, raws, strict=True) if raw is not None}
    missing = [loc for loc in query.locations if loc not in found]
    if missing:
        raise ApiError(
            "location_not_found", f"no carbon forecast for {', '.join(missing)}", param="location"
        )
    now = time.time()
    return [
        emissions_forecast(loc, decode(as_bytes(raw), Forecast), query, now)
        for loc, raw in found.items()
    ]


async def _metrics(_request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_app(state: GatewayState) -> web.Application:
    """The OpenAI-compatible application over ``state``."""
    app = web.Application(client_max_size=state.config.max_body_bytes, middlewares=[_observe])
    app[STATE] = state
    app.router.add_post("/v1/completions", _handler("completion"))
    app.router.add_post("/v1/chat/completions", _handler("chat"))
    app.router.add_get("/v1/models", _models)
    # Model ids may hold a slash (``org/name``), which the client sends percent-encoded.
    app.router.add_get("/v1/models/{model:.+}", _retrieve_model)
    app.router.add_get("/emissions/forecasts/current", _emissions_forecasts)
    app.router.add_get("/healthz", _health)
    app.router.add_get("/metrics", _metrics)
    return app
