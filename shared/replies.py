"""Ending a request with a clear error, the same way from every service."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
import nats.errors
from nats.aio.client import Client

from proto.codec import encode
from proto.messages import ErrorReply, Request, client_request_id
from proto.subjects import Subjects
from shared.cancels import CANCELLED_CODE
from shared.counters import ERRORS

__all__ = ["Send", "reply_error"]

Send = Callable[[str, bytes], Awaitable[None]]
"""Publishes a payload to a subject."""

logger = logging.getLogger(__name__)


async def reply_error(
    nc: Client,
    subjects: Subjects,
    *,
    service: str,
    code: str,
    reason: str,
    request: Request | None = None,
    reply_subject: str | None = None,
    done_subject: str | None = None,
    send: Send | None = None,
) -> None:
    """Send an ErrorReply to the client and to a ``request.done`` bookkeeping subject.

    ``done_subject`` is the sender's own (a worker's
    :meth:`~proto.subjects.Subjects.request_done_worker`); by default the control plane's.
    ``send`` publishes the client's copy in the sender's own way (a worker's keeps it for a
    re-send after a NATS outage, as it keeps its other replies); by default ``nc.publish``.

    The client's copy carries the client's own request id, ``request.done``'s the
    stack-wide (scoped) one. Without a request (undecodable payload) and no reply subject,
    the error goes to the dead-letter subject so it is still visible and counted.

    Raises:
        nats.errors.Error: the client's copy could not be sent (the bookkeeping copy is
            best effort: counted as ``done_unsent``).
    """
    if code != CANCELLED_CODE:
        # A client's cancel is no failure, and is counted where it happens (the scheduler's
        # and the worker's greenserve_cancelled_total): counting it here too made every
        # cancelled request an error on the dashboard's error ratio.
        ERRORS.labels(service, code).inc()
    error = ErrorReply(
        code=code,
        reason=reason[:2048],
        service=service,
        request_id=request.request_id if request else None,
        at=time.time(),
    )
    payload = encode(error)
    own_id = client_request_id(error.request_id) if error.request_id else None
    to_client = (
        payload
        if own_id == error.request_id
        else encode(msgspec.structs.replace(error, request_id=own_id))
    )
    target = request.reply_subject if request else reply_subject
    if target:
        await (send or nc.publish)(target, to_client)
    else:
        await nc.publish(subjects.errors, payload)
    if request is not None:
        try:
            await nc.publish(done_subject or subjects.request_done_control, payload)
        except nats.errors.Error as exc:
            # The client has its answer; only bookkeeping is late, and the audits of
            # endings nobody heard cover it. Raising here would tell the caller the client
            # went unanswered, and a caller that keeps the request would answer it twice.
            ERRORS.labels(service, "done_unsent").inc()
            logger.warning("request.done of %s not sent: %s", error.request_id, exc)
    logger.info("request %s ended with %s: %s", error.request_id, code, reason)
