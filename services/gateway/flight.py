"""One published request until its final reply, and the cancel sent when it has none.

A request the gateway published runs on a GPU whether or not anyone reads its answer. When
the handler ends without the final reply (its HTTP client disconnected, the gateway's own
timeout ran out) the gateway cancels it, so the stack stops generating for nobody
(docs/protocol.md, Cancellation). An ingress publish that failed but may have stored the
request is cancelled the same way (:mod:`.ingress`, :func:`cancel_published`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import msgspec
from nats.aio.client import Client
from prometheus_client import Counter

from proto.messages import Completion, ErrorReply
from proto.subjects import Subjects
from services.gateway.state import NAME
from shared.cancels import send_cancel
from shared.counters import ERRORS

__all__ = [
    "CANCELS_SENT",
    "CANCEL_NOT_SENT",
    "CLIENT_DISCONNECTED",
    "GATEWAY_TIMEOUT",
    "PUBLISH_FAILED",
    "Flight",
    "cancel_published",
    "cancel_unanswered",
]

CANCELS_SENT: Counter = Counter(
    "greenserve_gateway_cancels_total",
    "Cancels the gateway sent (handed to NATS) for requests it had published and no longer "
    "waits for, by why",
    ["why"],
)
CANCEL_NOT_SENT = "cancel_not_sent"
"""``greenserve_errors_total{service="gateway", code=...}`` of a cancel NATS did not take
(the connection was closed or draining): the request runs to its end for nobody."""

CLIENT_DISCONNECTED = "client_disconnected"
"""``why``: the HTTP client left (its handler was cancelled, or a write to it failed)."""
GATEWAY_TIMEOUT = "gateway_timeout"
"""``why``: no reply within ``gateway.request_timeout_s``."""
PUBLISH_FAILED = "publish_failed"
"""``why``: the ingress publish failed in a way that may have stored the request."""

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Flight:
    """A request stored in a cell's ingress stream, until its final reply arrives."""

    subjects: Subjects
    """The subjects of the cell it went to (its cancel goes to the same cell)."""
    request_id: str
    """The gateway's own id of it (the cell scopes it with the gateway's client id)."""
    ended: bool = False
    """Its Completion or ErrorReply arrived: nothing left to cancel."""
    timed_out: bool = False
    """The gateway stopped waiting (``request_timeout_s``); else its client left."""

    def saw(self, reply: msgspec.Struct) -> None:
        """Note a reply; a final one ends the flight."""
        if isinstance(reply, Completion | ErrorReply):
            self.ended = True


async def cancel_unanswered(nc: Client, client_id: str, flight: Flight | None) -> None:
    """Cancel ``flight`` unless it was never published or its final reply came."""
    if flight is None or flight.ended:
        return
    why = GATEWAY_TIMEOUT if flight.timed_out else CLIENT_DISCONNECTED
    await cancel_published(nc, flight.subjects, client_id, flight.request_id, why)


async def cancel_published(
    nc: Client, subjects: Subjects, client_id: str, request_id: str, why: str
) -> bool:
    """Cancel a request this gateway published (or may have); whether NATS took the cancel.

    Every cancel the gateway sends goes through here, so none escapes the counters: one
    handed to NATS counts in ``greenserve_gateway_cancels_total`` under ``why`` (also the
    cancel's reason), one that could not be counts as the gateway's error
    :data:`CANCEL_NOT_SENT` instead.
    """
    logger.info("cancelling %s: %s", request_id, why)
    sent = await send_cancel(nc, subjects, client_id, request_id, why)
    if sent:
        CANCELS_SENT.labels(why).inc()
    else:
        ERRORS.labels(NAME, CANCEL_NOT_SENT).inc()
    return sent
