"""Replies to clients that a NATS outage may have swallowed, sent again after reconnecting.

Token chunks and completions go to clients over core NATS: at most once. While nats-server
restarts, a worker's client buffers what it publishes and flushes it as soon as *it* has
reconnected, but a client whose own connection comes back later has no subscription yet,
and the server drops those messages; messages in the dying server's buffers are lost too.
A request that finished during the outage would then never be answered although it ran.

:class:`ReplyOutbox` keeps the client replies of the last ``window_s`` seconds. When the
worker sees its connection down, those and everything published until it is back are kept
for a re-send, ``grace_s`` after the reconnect (time for clients to resubscribe). A client
sees each of them at most twice, unchanged: chunks carry token indices and a repeated
completion is the same message, so a client can drop repeats (``loadgen.replay`` does; the
gateway has closed the request by then). Pure: the worker shell feeds it the clock and the
connection state.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["PENDING_MAX", "RESEND_GRACE_S", "RESEND_WINDOW_S", "OutboxEntry", "ReplyOutbox"]

RESEND_WINDOW_S = 1.0
"""Replies published this long before the outage was noticed are sent again too."""
RESEND_GRACE_S = 1.5
"""Wait after reconnecting before the re-send: clients reconnect every 0.5 s."""
PENDING_MAX = 50_000
"""Replies kept for the re-send at most; beyond it the oldest go first. While NATS is down
the engine keeps producing (about 1,300 chunks/s for 64 streams at the 50 ms window), and an
outage of minutes must not grow the worker's memory without bound; the newest replies are
the ones a reconnected client can still use (a completion ends its request)."""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One reply as it was published."""

    subject: str
    payload: bytes
    headers: dict[str, str] | None
    at: float


class ReplyOutbox:
    """Recent client replies, and those to send again after an outage."""

    def __init__(self, window_s: float = RESEND_WINDOW_S, grace_s: float = RESEND_GRACE_S) -> None:
        """Keep ``window_s`` of replies; re-send ``grace_s`` after reconnecting."""
        self._window_s = window_s
        self._grace_s = grace_s
        self._recent: deque[OutboxEntry] = deque()
        self._pending: deque[OutboxEntry] = deque(maxlen=PENDING_MAX)
        self._down = False
        self._resend_at: float | None = None

    @property
    def pending(self) -> int:
        """Replies waiting for the re-send."""
        return len(self._pending)

    def record(
        self, subject: str, payload: bytes, headers: dict[str, str] | None, now: float
    ) -> None:
        """Note one reply just published (or buffered by a reconnecting client)."""
        entry = OutboxEntry(subject, payload, headers, now)
        if self._down or self._resend_at is not None:
            self._pending.append(entry)
            return
        self._recent.append(entry)
        while self._recent and now - self._recent[0].at > self._window_s:
            self._recent.popleft()

    def observe(self, connected: bool, now: float) -> list[OutboxEntry]:
        """Follow the connection state; return the replies to publish again now."""
        if not connected:
            if not self._down:
                self._down = True
                self._resend_at = None
                self._pending.extend(e for e in self._recent if now - e.at <= self._window_s)
                self._recent.clear()
            return []
        if self._down:
            self._down = False
            self._resend_at = now + self._grace_s
        if self._resend_at is None or now < self._resend_at:
            return []
        due, self._resend_at = list(self._pending), None
        self._pending.clear()
        return due
