"""The worker's publishes: never raised out of the engine loop, client replies kept to resend.

Everything a worker sends while it serves (token chunks, completions, errors,
``request.done``, stats announcing a closed or opened admission gate) goes through
:class:`ReplyPublisher`. A NATS error is counted and logged once per outage but not
raised: publishing runs in the engine loop, whose end would end the worker with every
request it holds. Replies to clients are also kept in a :class:`~.outbox.ReplyOutbox` and
sent again once NATS is back (:meth:`ReplyPublisher.resend_loop`); a lost ``request.done``
is found in the ended log instead (:mod:`.ended_log`).

What counts as an outage is the shell's to say (:class:`Contact`): a connection that is down,
but also a heartbeat that no longer reaches the store, which is all a worker on a host cut
off from the rest sees while its NATS node, on the same side of the cut, takes its publishes
without a word. The re-send after it skips the requests the router revoked meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

import nats.errors
from prometheus_client import Counter

from services.worker.outbox import ReplyOutbox
from shared.counters import ERRORS
from shared.lifecycle import ServiceContext

__all__ = ["REVOKED_REPLIES_DROPPED", "Contact", "ReplyPublisher"]

REVOKED_REPLIES_DROPPED: Final = Counter(
    "greenserve_worker_revoked_replies_dropped_total",
    "Requests whose kept replies a worker did not send again after an outage or a partition: "
    "the router had revoked them and run them elsewhere",
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Contact:
    """How the re-send loop learns the worker's contact with the stack (from the shell)."""

    in_contact: Callable[[], bool]
    """Whether the worker reaches the stack now (NATS connected, heartbeat stored lately)."""
    confirmed_at: Callable[[], float]
    """Wall time the last heartbeat that reached NATS and the store began."""
    lost: Callable[[], None]
    """Called once when contact is found lost: the shell holds its ended records."""
    regained: Callable[[], Awaitable[None]]
    """Awaited once when contact comes back: the shell checks its revocations at once."""
    revocations: Callable[[], Awaitable[Mapping[str, float] | None]]
    """The worker's revocations now (request id → time revoked); None: unreadable."""


class ReplyPublisher:
    """Publishes on ``ctx.nc`` for one worker; errors count under ``service``."""

    def __init__(self, ctx: ServiceContext, service: str) -> None:
        self._ctx = ctx
        self._service = service
        self._outbox = ReplyOutbox()
        """Recent client replies, sent again after a NATS outage (:mod:`.outbox`)."""
        self._failing = False
        """A publish failed and none succeeded since (one log line per outage)."""

    @property
    def outbox(self) -> ReplyOutbox:
        """The kept replies (for the shell to name each reply subject's request)."""
        return self._outbox

    async def reply(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        """Publish a reply to a client and keep it for a re-send should NATS go away.

        Kept even when the publish failed: the outbox re-sends it once NATS is back.
        """
        await self.publish(subject, payload, headers)
        self._outbox.record(subject, payload, headers, time.time())

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        """Publish; a NATS error is counted and logged (once per outage), not raised.

        While nats-server restarts the client buffers publishes only up to its pending limit
        (2 MiB), then raises ``OutboundBufferLimitError``: a worker streaming to many
        clients reaches that within seconds of an outage. Chunks and completions are then
        re-sent from the outbox, a lost ``request.done`` is found in the ended log.
        """
        try:
            await self._ctx.nc.publish(subject, payload, headers=headers)
        except nats.errors.Error as exc:
            ERRORS.labels(self._service, "publish").inc()
            if not self._failing:
                self._failing = True
                logger.warning(
                    "publishing failed (%s: %s); re-sent when NATS is back", type(exc).__name__, exc
                )
            return
        self._failing = False

    async def resend_loop(self, contact: Contact, period_s: float = 0.05) -> None:
        """Watch the contact; once it is back, send the replies it may have swallowed,
        except those of requests the router revoked meanwhile."""
        nc = self._ctx.nc
        was_in_contact = True
        while True:
            await asyncio.sleep(period_s)
            in_contact = contact.in_contact()
            if in_contact and not was_in_contact:
                await contact.regained()
            elif was_in_contact and not in_contact:
                contact.lost()
            was_in_contact = in_contact
            if not self._outbox.observe(in_contact, time.time(), contact.confirmed_at()):
                continue
            revoked = await contact.revocations()
            if revoked is None:
                # Unknown: sending may answer a request twice, dropping may lose it. Kept,
                # and tried again next period (the store answered a heartbeat just now).
                await asyncio.sleep(0.5)
                continue
            due, dropped = self._outbox.take_due(revoked)
            if dropped:
                REVOKED_REPLIES_DROPPED.inc(dropped)
                logger.warning(
                    "not re-sending the replies of %d requests the router revoked meanwhile",
                    dropped,
                )
            if due:
                logger.info("re-sending %d client replies after an outage", len(due))
            else:
                logger.info("contact is back; no client replies to send again")
            for entry in due:
                with contextlib.suppress(nats.errors.Error):
                    await nc.publish(entry.subject, entry.payload, headers=entry.headers)
