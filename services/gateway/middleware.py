"""The middleware around every gateway route: a SERVER span, JSON errors, count and latency.

Each HTTP request but a scrape or probe (:data:`UNTRACED_ROUTES`) gets one span
(continuing a client's ``traceparent``; failed, with the reason, when the request failed
or its client left), one count in
``greenserve_http_requests_total{route,status}`` and one observation of its wall time in
``greenserve_http_request_duration_seconds{route,status}`` (until the response is complete:
the whole stream for an SSE answer). aiohttp's own 404 and 405 and any
unexpected exception before the response started reach the client in OpenAI's error shape
(:func:`.state.error_response`), not as aiohttp's text; once an SSE stream has started the
exception is left to end the stream, since a second response would corrupt it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from opentelemetry import propagate, trace
from prometheus_client import Counter, Histogram

from services.gateway.errors import ApiError
from services.gateway.state import API_ERROR, NAME, STREAMING, error_response

__all__ = ["HTTP_DURATION_S", "HTTP_REQUESTS", "UNTRACED_ROUTES", "observe"]

HTTP_REQUESTS: Counter = Counter(
    "greenserve_http_requests_total", "HTTP requests to the gateway", ["route", "status"]
)
HTTP_DURATION_S: Histogram = Histogram(
    "greenserve_http_request_duration_seconds",
    "Wall time from a request's arrival at the gateway to its complete response (an SSE "
    "answer's whole stream), by route and status",
    ["route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)

UNTRACED_ROUTES = frozenset({"/metrics", "/healthz", "/readyz", "/health"})
"""Routes served without a span (still counted and timed)."""

logger = logging.getLogger(__name__)


@web.middleware
async def observe(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """One SERVER span per HTTP request (continuing a client's traceparent); JSON 404/405."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    started = time.perf_counter()
    span_cm: contextlib.AbstractContextManager[trace.Span]
    if route in UNTRACED_ROUTES:
        # A scrape or probe every few seconds is no request: a trace each would bury them.
        span_cm = contextlib.nullcontext(trace.INVALID_SPAN)
    else:
        span_cm = trace.get_tracer(f"greenserve.{NAME}").start_as_current_span(
            f"{request.method} {route}",
            context=propagate.extract(dict(request.headers)),
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": request.method, "url.path": request.path},
            # Set below, with the reason: OpenTelemetry's own would overwrite it.
            set_status_on_exception=False,
        )
    with span_cm as span:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            code = "not_found" if exc.status == 404 else "method_not_allowed"
            response = error_response(ApiError(code, exc.reason, status=exc.status))
            if "Allow" in exc.headers:  # a 405 says which methods the route has
                response.headers["Allow"] = exc.headers["Allow"]
        except (ConnectionResetError, asyncio.CancelledError):
            # The client is gone: there is no one to answer; the request was cancelled.
            span.set_status(trace.StatusCode.ERROR, "cancelled: the client disconnected")
            raise
        except Exception as exc:
            span.set_status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
            if request.get(STREAMING):
                raise  # headers are out; a second response would corrupt the stream
            # A bug must still reach an OpenAI client as its error shape, not aiohttp's text.
            logger.exception("%s %s failed", request.method, request.path)
            span.record_exception(exc)
            response = error_response(
                ApiError("internal", "the gateway failed to answer this request", status=500)
            )
        span.set_attribute("http.response.status_code", response.status)
        failure = response.get(API_ERROR)
        if failure is not None:
            span.set_attribute("error.type", failure.code)
        if response.status >= 500:
            why = f"{failure.code}: {failure.message}" if failure is not None else None
            span.set_status(trace.StatusCode.ERROR, why)
    status = str(response.status)
    HTTP_REQUESTS.labels(route, status).inc()
    HTTP_DURATION_S.labels(route, status).observe(time.perf_counter() - started)
    return response
