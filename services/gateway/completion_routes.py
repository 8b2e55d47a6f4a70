"""``POST /v1/completions`` and ``POST /v1/chat/completions``: one handler per endpoint.

Both routes run the same steps, told apart by the :data:`~.openai_schema.Endpoint` the
body is validated as: take a place under the gateway's ceiling (:mod:`.admission`: over
it, 429 before the body is read), open the reply queue under a fresh request id, read the
body (:mod:`.body`) and validate it once (:mod:`.openai_schema`), store it in a cell's
ingress (:mod:`.ingress`), answer from the replies (:mod:`.answers`). Whatever way the
handler ends, its place is given back, the queue is closed, the cell's in-flight count
released, and a published request left without its final reply is cancelled
(:mod:`.flight`): its client disconnected or the gateway timed out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from opentelemetry import trace

from services.gateway.answers import answer
from services.gateway.body import read_body, send_and_close
from services.gateway.cells import Cell
from services.gateway.errors import ApiError
from services.gateway.flight import Flight, cancel_unanswered
from services.gateway.ingress import publish
from services.gateway.openai_schema import Endpoint, parse_body
from services.gateway.state import STATE, GatewayState, error_response

__all__ = ["completion_handler"]

logger = logging.getLogger(__name__)


def completion_handler(
    endpoint: Endpoint,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The route handler of one completion endpoint (``completion`` or ``chat``)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        try:
            state.admission.enter()
        except ApiError as err:
            return error_response(err)
        try:
            return await _serve(request, state, endpoint)
        finally:
            state.admission.leave()

    return handle


async def _serve(
    request: web.Request, state: GatewayState, endpoint: Endpoint
) -> web.StreamResponse:
    """Read, validate and publish the body, then answer it from its replies."""
    request_id = state.new_request_id()
    trace.get_current_span().set_attribute("request.id", request_id)
    queue = state.router.open(request_id)
    cell: Cell | None = None
    flight: Flight | None = None
    try:
        raw = await read_body(request, state.config.max_body_bytes, state.config.body_timeout_s)
        parsed = parse_body(
            raw,
            endpoint,
            models=state.models,
            default_max_tokens=state.config.default_max_tokens,
            chat_default_max_tokens=state.config.chat_default_max_tokens,
            max_tokens_limit=state.config.max_tokens_limit,
        )
        cell = await publish(state, parsed, request_id)
        flight = Flight(cell.subjects, request_id)
        return await answer(request, state, parsed, flight, queue)
    except ApiError as err:
        if err.code == "body_timeout":
            return await send_and_close(request, error_response(err))
        return error_response(err)
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
