"""Bind a request's client id to the ingress subject it arrived on (docs/security.md).

A NATS subscriber is not told who published a message, so the ``client_id`` field of a
``Request`` proves nothing by itself. What a secured server does enforce is the subject: a
client identity may publish only ``ingress.client.<its client id>``
(``shared.security.nats_acl``). The classifier therefore takes the client id from the
subject and refuses a request whose ``client_id`` field or reply subject names another
client; otherwise a client could aim tokens, completions or errors at someone else's
stream.

Request ids are bound the same way: a bound request's id becomes
``<client id>.<its id>`` (:func:`proto.messages.scoped_request_id`) for the rest of the
stack, so two clients' equal ids are two requests and one client cannot make the
de-duplication drop another's request; replies to the client carry its own id again. A
client's id may therefore not hold a ``.`` (``bad_request_id``). A client that reuses one
of *its own* ids gets ``duplicate_request_id`` (:func:`refuse_reused_id`).

:func:`bind_request` and :func:`error_reply_target` are pure; :func:`admit_bound_request`
and :func:`refuse_reused_id` are the calls the classifier shell makes.
"""

from __future__ import annotations

import functools
import logging
import time

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from proto.codec import encode
from proto.messages import ErrorReply, Request, client_request_id, scoped_request_id
from proto.subjects import Subjects, valid_token
from shared.counters import ERRORS

__all__ = [
    "BAD_INGRESS_SUBJECT",
    "BAD_REQUEST_ID",
    "CLIENT_ID_MISMATCH",
    "DUPLICATE_REQUEST_ID",
    "IngressRefusal",
    "admit_bound_request",
    "bind_request",
    "bound_client_id",
    "error_reply_target",
    "refuse_reused_id",
]

CLIENT_ID_MISMATCH = "client_id_mismatch"
"""Error code: the payload names a client other than the one its ingress subject binds."""

BAD_INGRESS_SUBJECT = "bad_ingress_subject"
"""Error code: an ingress subject that is neither the unbound one nor a client's own."""

BAD_REQUEST_ID = "bad_request_id"
"""Error code: a client's request id holds a ``.`` (the form of a stack-wide, scoped id)."""

DUPLICATE_REQUEST_ID = "duplicate_request_id"
"""Error code: the client already used this request id for another message."""

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


@functools.lru_cache(maxsize=16)
def _bound_prefix(subjects: Subjects) -> str:
    # Cached: it is asked for every ingress message, and the subject builders validate.
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
    """The request bound to ``subject``: its client id, and its id scoped by that client.

    On the unbound ingress the request is returned unchanged (its id unscoped).

    Raises:
        IngressRefusal: ``client_id_mismatch`` when the payload's ``client_id`` or reply
            subject names another client (the answer then goes to the sender's own reply
            subject for this request id), ``bad_request_id`` for an id with a ``.``, or
            ``bad_ingress_subject``.
    """
    client_id = bound_client_id(subjects, subject)
    space = subjects.client_prefix + (f"{client_id}." if client_id is not None else "")
    if "." in request.request_id:
        # Only the classifier scopes ids; a client's own id is one token.
        reply = request.reply_subject if request.reply_subject.startswith(space) else None
        raise IngressRefusal(
            BAD_REQUEST_ID,
            f"request id {request.request_id!r} must be one token ([A-Za-z0-9_-], no '.')",
            reply,
        )
    if client_id is None:
        return request
    if request.client_id not in (None, client_id):
        raise IngressRefusal(
            CLIENT_ID_MISMATCH,
            f"client_id {request.client_id!r} differs from {client_id!r}, the client "
            f"this ingress subject belongs to",
            subjects.client_reply(client_id, request.request_id),
        )
    if not request.reply_subject.startswith(space):
        raise IngressRefusal(
            CLIENT_ID_MISMATCH,
            f"reply subject {request.reply_subject!r} is outside client {client_id!r}'s "
            f"replies {space}>",
            subjects.client_reply(client_id, request.request_id),
        )
    return msgspec.structs.replace(
        request,
        client_id=client_id,
        request_id=scoped_request_id(client_id, request.request_id),
    )


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


async def refuse_reused_id(nc: Client, subjects: Subjects, msg: Msg, request: Request) -> None:
    """Answer a message whose (scoped) request id its client had already used, and settle it.

    The request was not stored (the scheduler's seen-mark holds another ingress message
    for this id). The ``duplicate_request_id`` error goes to the request's reply subject,
    which binding has put in the sender's own space, carrying the client's own id; not to
    ``request.done``: that would end the *first* request with this id in the bookkeeping.
    The message is acked: redelivering it would only be refused again.
    """
    ERRORS.labels(SERVICE, DUPLICATE_REQUEST_ID).inc()
    own_id = client_request_id(request.request_id)
    error = ErrorReply(
        code=DUPLICATE_REQUEST_ID,
        reason=(
            f"request id {own_id!r} was already used by this client for another request; "
            "this one was not run (send a new request with a new id)"
        ),
        service=SERVICE,
        request_id=own_id,
        at=time.time(),
    )
    target = request.reply_subject
    await nc.publish(
        target if target.startswith(subjects.client_prefix) else subjects.errors, encode(error)
    )
    await msg.ack()
    logger.info("request %s refused: its id was used before", request.request_id)
