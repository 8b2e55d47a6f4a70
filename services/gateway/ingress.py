"""From an HTTP body to a request stored in a cell's ingress stream.

The body was read by :mod:`.body`; the parsed request is published to a cell's
``ingress.client.<client id>`` with ``Nats-Msg-Id`` (a retried publish is not a second
request), the reply subject in :data:`REPLY_HEADER` and the trace context (:func:`publish`).
A cell whose stream does not answer is skipped for the next; a publish that may have been
stored is cancelled before the client hears 503, so it does not run for nobody while the
client retries under a new id.
"""

from __future__ import annotations

import asyncio
import logging
import time

import nats.errors
import nats.js.errors
from prometheus_client import Counter

from proto.codec import encode
from proto.messages import scoped_request_id
from proto.subjects import Subjects
from services.gateway.cells import Cell
from services.gateway.errors import ApiError
from services.gateway.flight import CLIENT_DISCONNECTED, PUBLISH_FAILED, cancel_published
from services.gateway.openai_schema import ParsedRequest, to_request
from services.gateway.state import GatewayState
from shared.telemetry import inject_headers

__all__ = ["CELL_REQUESTS", "REPLY_HEADER", "publish"]

REPLY_HEADER = "Gs-Reply"
"""The classifier answers an undecodable payload on this header's subject."""

CELL_REQUESTS: Counter = Counter(
    "greenserve_gateway_cell_requests_total",
    "Requests the gateway stored in each cell's ingress stream",
    ["cell"],
)

logger = logging.getLogger(__name__)


async def publish(state: GatewayState, parsed: ParsedRequest, request_id: str) -> Cell:
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
        context_tokens=(
            None
            if state.context_tokens is None
            else state.model_contexts.get(parsed.model, state.context_tokens)
        ),
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
        # A cancelled handler is its client leaving mid-publish, not the ingress failing.
        left = isinstance(exc, asyncio.CancelledError)
        why = CLIENT_DISCONNECTED if left else PUBLISH_FAILED
        await cancel_published(state.nc, subjects, state.client_id, request_id, why)
        if left:
            raise
        logger.warning("ingress publish of %s failed: %r", request_id, exc)
        raise ApiError("unavailable", "the ingress is unavailable; retry later") from None
