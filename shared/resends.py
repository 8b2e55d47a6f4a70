"""Endings a reconnected client may have missed, asked for again (docs/deploy.md, what each
fault costs).

Replies travel on core NATS: a client whose node is lost moves to another, and what was
published to it meanwhile (an ending as well as token chunks) is gone. Nothing keeps
answers durably, but every worker remembers the endings it sent lately
(``services/worker/completions.py``). So a client, once reconnected, publishes the ids of
its unanswered requests on its own ``resend.client.<client id>``
(:func:`resend_after_reconnects`), and every worker sends again the ending it remembers of
each, bound to that subject's client (:func:`resend_ids`): a client can ask only for its
own answers. It drops a repeat as it drops the re-send after an outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Final

import nats.errors
from nats.aio.client import Client

from proto.codec import DecodeError, decode, encode
from proto.messages import MAX_RESEND_IDS, ResendRequest, scoped_request_id
from proto.subjects import Subjects, valid_token

__all__ = ["ASK_AGAIN_AFTER_S", "ask_resend", "resend_after_reconnects", "resend_ids"]

ASK_AGAIN_AFTER_S: Final = 1.0
"""A reconnected client asks once at once and once more this much later: a worker that was
itself moving to another node at the first ask did not hear it."""

logger = logging.getLogger(__name__)


async def ask_resend(
    nc: Client, subjects: Subjects, client_id: str, request_ids: Iterable[str]
) -> int:
    """Ask every worker for the endings of client ``client_id``'s ``request_ids`` (its own
    ids) again; fire and forget. Returns how many ids were handed to NATS."""
    ids = list(request_ids)
    sent = 0
    for start in range(0, len(ids), MAX_RESEND_IDS):
        part = ids[start : start + MAX_RESEND_IDS]
        message = ResendRequest(request_ids=part, at=time.time())
        try:
            await nc.publish(subjects.resend(client_id), encode(message))
        except nats.errors.Error as exc:
            logger.warning("asking for %d endings again failed: %s", len(part), exc)
            return sent
        sent += len(part)
    return sent


async def resend_after_reconnects(
    nc: Client,
    subjects: Subjects,
    client_id: str,
    unanswered: Callable[[], Iterable[str]],
    period_s: float = 0.1,
) -> None:
    """Until cancelled: after each reconnect of ``nc``, ask for the endings of the requests
    ``unanswered()`` names (the client's own ids), at once and :data:`ASK_AGAIN_AFTER_S`
    later. nats-py resubscribes before it counts the reconnect, so the answers find the
    client's subscriptions on its new node."""
    seen = nc.stats["reconnects"]
    ask_again_at: float | None = None
    while True:
        await asyncio.sleep(period_s)
        reconnects = nc.stats["reconnects"]
        now = time.monotonic()
        if reconnects != seen and nc.is_connected:
            seen = reconnects
            ask_again_at = now + ASK_AGAIN_AFTER_S
        elif ask_again_at is None or now < ask_again_at:
            continue
        else:
            ask_again_at = None
        ids = list(unanswered())
        if ids:
            asked = await ask_resend(nc, subjects, client_id, ids)
            logger.info("reconnected: asked for %d endings again", asked)


def resend_ids(subject: str, data: bytes) -> list[str] | None:
    """The stack-wide (scoped) ids an ask on ``subject`` names; ``None`` if malformed.

    The client id is the subject's last token, never the payload's: a client may publish
    only its own resend subject, so it can ask only for its own answers.
    """
    client_id = subject.rpartition(".")[2]
    if not valid_token(client_id):
        return None
    try:
        message = decode(data, ResendRequest)
    except DecodeError:
        return None
    return [scoped_request_id(client_id, rid) for rid in message.request_ids]
