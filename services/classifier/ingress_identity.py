"""Bind a request's client id to the ingress subject it arrived on (docs/security.md).

A NATS subscriber is not told who published a message, so the ``client_id`` field of a
``Request`` proves nothing by itself. What a secured server does enforce is the subject: a
client identity may publish only ``ingress.client.<its client id>``
(``shared.security.nats_acl``). The classifier therefore takes the client id from the
subject and refuses a request whose ``client_id`` field or reply subject names another
client; otherwise a client could aim tokens, completions or errors at someone else's
stream. :func:`bind_request` and :func:`error_reply_target` are pure;
:func:`admit_bound_request` is the one call the classifier shell makes.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from proto.codec import encode
from proto.messages import ErrorReply, Request
from proto.subjects import Subjects, valid_token
from shared.counters import ERRORS

__all__ = [
    "BAD_INGRESS_SUBJECT",
    "CLIENT_ID_MISMATCH",
    "IngressRefusal",
    "admit_bound_request",
    "bind_request",
    "bound_client_id",
    "error_reply_target",
    "widen_legacy_consumer",
]

CLIENT_ID_MISMATCH = "client_id_mismatch"
"""Error code: the payload names a client other than the one its ingress subject binds."""

BAD_INGRESS_SUBJECT = "bad_ingress_subject"
"""Error code: an ingress subject that is neither the unbound one nor a client's own."""

SERVICE = "classifier"

logger = logging.getLogger(__name__)


class IngressRefusal(Exception):  # noqa: N818 - a verdict, raised like RequestRejectedError
    """A request refused for its identity; ``reply_subject`` is where the answer goes."""

    def __init__(self, code: str, reason: str, reply_subject: str | None) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason
        self.reply_subject = reply_subject
        """The sender's own reply subject, or ``None`` for the dead-letter subject."""


def _bound_prefix(subjects: Subjects) -> str:
    return subjects.ingress_client("_")[:-1]  # "<p>.ingress.client."


def bound_client_id(subjects: Subjects, subject: str) -> str | None:
    """The client id an ingress subject binds, or ``None`` for the unbound ingress.

    Raises:
        IngressRefusal: ``bad_ingress_subject`` for any other subject under the ingress.
    """
    if subject == subjects.ingress_request:
        return None
    prefix = _bound_prefix(subjects)
    client_id = subject[len(prefix) :] if subject.startswith(prefix) else ""
    if not valid_token(client_id):  # also refuses deeper subjects (a '.' is not a token)
        raise IngressRefusal(
            BAD_INGRESS_SUBJECT,
            f"ingress subject {subject!r} is neither {subjects.ingress_request} "
            f"nor {prefix}<client id>",
            None,
        )
    return client_id


def bind_request(subjects: Subjects, subject: str, request: Request) -> Request:
    """The request with its client id bound to ``subject`` (unchanged on the unbound ingress).

    Raises:
        IngressRefusal: ``client_id_mismatch`` when the payload's ``client_id`` or reply
            subject names another client (the answer then goes to the sender's own reply
            subject for this request id), or ``bad_ingress_subject``.
    """
    client_id = bound_client_id(subjects, subject)
    if client_id is None:
        return request
    own = subjects.client_reply(client_id, request.request_id)
    if request.client_id not in (None, client_id):
        raise IngressRefusal(
            CLIENT_ID_MISMATCH,
            f"client_id {request.client_id!r} differs from {client_id!r}, the client "
            f"this ingress subject belongs to",
            own,
        )
    if not request.reply_subject.startswith(f"{subjects.client_prefix}{client_id}."):
        raise IngressRefusal(
            CLIENT_ID_MISMATCH,
            f"reply subject {request.reply_subject!r} is outside client {client_id!r}'s "
            f"replies {subjects.client_prefix}{client_id}.>",
            own,
        )
    if request.client_id == client_id:
        return request
    return msgspec.structs.replace(request, client_id=client_id)


def error_reply_target(subjects: Subjects, subject: str, header: str | None) -> str | None:
    """Where an undecodable payload's error goes: its ``Gs-Reply`` header only if it may.

    The header must lie in the bound client's reply space (any client's on the unbound
    ingress); anything else, or a bad ingress subject, yields ``None``: the dead letters.
    """
    if not header:
        return None
    try:
        client_id = bound_client_id(subjects, subject)
    except IngressRefusal:
        return None
    space = subjects.client_prefix + (f"{client_id}." if client_id is not None else "")
    return header if header.startswith(space) else None


async def admit_bound_request(
    nc: Client, subjects: Subjects, msg: Msg, request: Request
) -> Request | None:
    """Bind ``request`` to ``msg``'s subject, or answer the refusal, count it and settle it.

    A refused message is ``term``-ed (never redelivered: it would be refused again). Its
    ``ErrorReply`` goes only to the sender's own reply subject, not to ``request.done``:
    no service ever held the request, and a forged request id on ``request.done`` could
    end another client's request in the bookkeeping.
    """
    try:
        return bind_request(subjects, msg.subject, request)
    except IngressRefusal as refusal:
        ERRORS.labels(SERVICE, refusal.code).inc()
        error = ErrorReply(
            code=refusal.code,
            reason=refusal.reason[:2048],
            service=SERVICE,
            request_id=request.request_id,
            at=time.time(),
        )
        await nc.publish(refusal.reply_subject or subjects.errors, encode(error))
        await msg.term()
        logger.info("request %s refused: %s", request.request_id, refusal)
        return None


async def widen_legacy_consumer(js: JetStreamContext, subjects: Subjects, durable: str) -> bool:
    """Re-filter a durable consumer made before bound ingress subjects from the unbound one.

    A consumer filtered on ``ingress.request`` would never deliver ``ingress.client.<id>``
    messages (they would wait in the stream until ``max_age``), and ``pull_subscribe``
    binds to an existing durable as it is. The update keeps the consumer, so its unacked
    messages are still delivered. Returns whether it changed anything.
    """
    try:
        info = await js.consumer_info(subjects.ingress_stream, durable)
    except NotFoundError:
        return False
    if info.config.filter_subject != subjects.ingress_request:
        return False
    widened = dataclasses.replace(info.config, filter_subject=subjects.ingress_wildcard)
    await js.add_consumer(subjects.ingress_stream, config=widened)
    logger.info("consumer %s now reads %s", durable, subjects.ingress_wildcard)
    return True
