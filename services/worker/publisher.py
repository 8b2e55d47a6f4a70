"""The worker's publishes: never raised out of the engine loop, client replies kept to resend.

Everything a worker sends while it serves (token chunks, completions, errors,
``request.done``, stats announcing a closed or opened admission gate) goes through
:class:`ReplyPublisher`. A NATS error is counted and logged once per outage but not
raised: publishing runs in the engine loop, whose end would end the worker with every
request it holds. Replies to clients are also kept in a :class:`~.outbox.ReplyOutbox` and
sent again once NATS is back (:meth:`ReplyPublisher.resend_loop`); a lost ``request.done``
is found in the ended log instead (:mod:`.ended_log`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import nats.errors

from services.worker.outbox import ReplyOutbox
from shared.counters import ERRORS
from shared.lifecycle import ServiceContext

__all__ = ["ReplyPublisher"]

logger = logging.getLogger(__name__)


class ReplyPublisher:
    """Publishes on ``ctx.nc`` for one worker; errors count under ``service``."""

    def __init__(self, ctx: ServiceContext, service: str) -> None:
        self._ctx = ctx
        self._service = service
        self._outbox = ReplyOutbox()
        """Recent client replies, sent again after a NATS outage (:mod:`.outbox`)."""
        self._failing = False
        """A publish failed and none succeeded since (one log line per outage)."""

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

    async def resend_loop(self, period_s: float = 0.05) -> None:
        """Watch the connection; after an outage, send the replies it may have swallowed."""
        nc = self._ctx.nc
        while True:
            await asyncio.sleep(period_s)
            due = self._outbox.observe(nc.is_connected, time.time())
            if due:
                logger.info("re-sending %d client replies after a NATS outage", len(due))
            for entry in due:
                with contextlib.suppress(nats.errors.Error):
                    await nc.publish(entry.subject, entry.payload, headers=entry.headers)
