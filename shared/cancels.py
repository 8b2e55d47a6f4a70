"""Request cancellation, the parts every party shares (docs/protocol.md, Cancellation).

A client publishes a :class:`~proto.messages.CancelRequest` on its own
``cancel.client.<client id>`` (:func:`send_cancel`); the scheduler and the workers decode it
bound to that subject's client (:func:`cancelled_id`) and remember it for a while
(:class:`CancelMemory`), because the request may reach them only after its cancel: still in
the ingress stream, or its dispatch still on the wire.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Final

import nats.errors
from nats.aio.client import Client

from proto.codec import DecodeError, decode, encode
from proto.messages import CancelRequest, scoped_request_id
from proto.subjects import Subjects, valid_token

__all__ = ["CANCELLED_CODE", "CancelMemory", "cancelled_id", "send_cancel"]

CANCELLED_CODE: Final = "cancelled"
"""The error code of a request its client cancelled."""

logger = logging.getLogger(__name__)


async def send_cancel(
    nc: Client, subjects: Subjects, client_id: str, request_id: str, reason: str = ""
) -> bool:
    """Ask the stack to end client ``client_id``'s request ``request_id`` (its own id).

    Best effort and fire-and-forget (core NATS, no reply): the request ends with a
    ``cancelled`` error on its reply subject if the stack still holds it; one already
    ended, or unknown, is left alone. Returns whether the cancel was handed to NATS.
    """
    message = CancelRequest(request_id=request_id, reason=reason[:256], at=time.time())
    try:
        await nc.publish(subjects.cancel(client_id), encode(message))
    except nats.errors.Error as exc:
        logger.warning("cancel of %s not sent: %s", request_id, exc)
        return False
    return True


def cancelled_id(subject: str, data: bytes) -> str | None:
    """The stack-wide (scoped) id a cancel on ``subject`` names; ``None`` if malformed.

    The client id is the subject's last token, never the payload's: a client may publish
    only its own cancel subject, so it can cancel only its own requests.
    """
    client_id = subject.rpartition(".")[2]
    if not valid_token(client_id):
        return None
    try:
        message = decode(data, CancelRequest)
    except DecodeError:
        return None
    return scoped_request_id(client_id, message.request_id)


class CancelMemory:
    """Request ids cancelled within the last ``window_s`` seconds (at most ``max_ids``; pure).

    What lets a hand-off that comes after the cancel (a submit, a requeue, a dispatch) end
    the request instead of running it. Bounded in time and size: cancels of requests the
    stack never holds must not grow it for ever.
    """

    def __init__(self, window_s: float, max_ids: int = 100_000) -> None:
        self._window_s = window_s
        self._max_ids = max_ids
        self._ids: OrderedDict[str, float] = OrderedDict()
        self._ended: set[str] = set()
        """Those of ``_ids`` already ended for their cancel here (:meth:`first_end`)."""

    def add(self, request_id: str, now: float) -> None:
        """Remember a cancel heard at ``now`` (monotonic seconds)."""
        self._ids[request_id] = now
        self._ids.move_to_end(request_id)
        self._expire(now)

    def holds(self, request_id: str, now: float) -> bool:
        """Whether ``request_id`` was cancelled within the window before ``now``."""
        at = self._ids.get(request_id)
        return at is not None and now - at <= self._window_s

    def first_end(self, request_id: str) -> bool:
        """Note that a remembered cancel's request was ended for it; whether for the first
        time (an ending sent again, to a repeated dispatch, is counted once).

        Remembered as long as the cancel itself: once that is forgotten, a dispatch of the
        request is run, not ended.
        """
        if request_id not in self._ids or request_id in self._ended:
            return False
        self._ended.add(request_id)
        return True

    def __len__(self) -> int:
        return len(self._ids)

    def _expire(self, now: float) -> None:
        while self._ids:
            oldest, at = next(iter(self._ids.items()))
            if now - at <= self._window_s and len(self._ids) <= self._max_ids:
                return
            del self._ids[oldest]
            self._ended.discard(oldest)
