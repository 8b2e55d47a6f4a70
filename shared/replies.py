"""Ending a request with a clear error, the same way from every service."""

from __future__ import annotations

import logging
import time

import msgspec
from nats.aio.client import Client

from proto.codec import encode
from proto.messages import ErrorReply, Request, client_request_id
from proto.subjects import Subjects
from shared.counters import ERRORS

__all__ = ["reply_error"]

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
) -> None:
    """Send an ErrorReply to the client and to a ``request.done`` bookkeeping subject.

    ``done_subject`` is the sender's own (a worker's
    :meth:`~proto.subjects.Subjects.request_done_worker`); by default the control plane's.

    The client's copy carries the client's own request id, ``request.done``'s the
    stack-wide (scoped) one. Without a request (undecodable payload) and no reply subject,
    the error goes to the dead-letter subject so it is still visible and counted.
    """
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
        await nc.publish(target, to_client)
    else:
        await nc.publish(subjects.errors, payload)
    if request is not None:
        await nc.publish(done_subject or subjects.request_done_control, payload)
    logger.info("request %s ended with %s: %s", error.request_id, code, reason)
