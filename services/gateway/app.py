"""The aiohttp application: the gateway's routes, each in the module that owns it.

A request is validated once (:mod:`services.gateway.openai_schema`), published to the
ingress stream with ``Nats-Msg-Id`` (a retried publish is not a second request), the
reply subject in ``Gs-Reply`` and the trace context, and answered from the replies that
arrive on this gateway's client subject: ``TokenChunk`` → text, ``Completion`` → end,
``ErrorReply`` → an OpenAI error with the status of :mod:`services.gateway.errors`. It
publishes on its own ``ingress.client.<client id>``; on a secured stack the client id is
its NATS user, the only one the server lets it publish and read as. A published request
whose handler ends without its final reply (the client disconnected, the gateway timed out)
is cancelled (:mod:`services.gateway.flight`).

Where each part lives: the shared state and error answer in :mod:`.state`, the span and
request count around every route in :mod:`.middleware`, the completion routes in
:mod:`.completion_routes` (body → :mod:`.ingress` → :mod:`.answers`, JSON or SSE), the
model routes in :mod:`.model_routes`, the carbon-aware query in :mod:`.forecast_route`;
liveness and readiness in :mod:`.health`, metrics here with :func:`build_app`; API keys
are checked in :mod:`.auth`, the ceiling on requests held in :mod:`.admission`, the body
read and decoded in :mod:`.body`.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.gateway.auth import authenticate
from services.gateway.completion_routes import completion_handler
from services.gateway.forecast_route import emissions_forecasts
from services.gateway.health import add_health_routes
from services.gateway.ingress import CELL_REQUESTS, REPLY_HEADER
from services.gateway.middleware import HTTP_REQUESTS, observe
from services.gateway.model_routes import list_models, retrieve_model
from services.gateway.state import NAME, STATE, GatewayState

__all__ = [
    "CELL_REQUESTS",
    "HTTP_REQUESTS",
    "NAME",
    "REPLY_HEADER",
    "STATE",
    "GatewayState",
    "build_app",
]


async def _metrics(_request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_app(state: GatewayState, *, serve_metrics: bool = True) -> web.Application:
    """The OpenAI-compatible application over ``state``.

    ``serve_metrics`` false leaves ``/metrics`` to the process's own metrics port
    (``telemetry.metrics_port``), off the API's address.
    """
    # observe wraps authenticate, so a refused key is counted and traced like any answer.
    app = web.Application(
        client_max_size=state.config.max_body_bytes, middlewares=[observe, authenticate]
    )
    app[STATE] = state
    app.router.add_post("/v1/completions", completion_handler("completion"))
    app.router.add_post("/v1/chat/completions", completion_handler("chat"))
    app.router.add_get("/v1/models", list_models)
    # Model ids may hold a slash (``org/name``), which the client sends percent-encoded.
    app.router.add_get("/v1/models/{model:.+}", retrieve_model)
    app.router.add_get("/emissions/forecasts/current", emissions_forecasts)
    add_health_routes(app)
    if serve_metrics:
        app.router.add_get("/metrics", _metrics)
    return app
