"""Replies to clients that an outage or a partition may have swallowed, sent again once the
worker is back in contact, except those of requests the router took back meanwhile.

Token chunks and completions go to clients over core NATS: at most once. While nats-server
restarts, a worker's client buffers what it publishes and flushes it as soon as *it* has
reconnected, but a client whose own connection comes back later has no subscription yet,
and the server drops those messages; messages in the dying server's buffers are lost too.
A worker on a host cut off from the rest (a partition) is worse off: its connection to a
node on another host goes silent, and the node it reconnects to, on its own side of the
cut, has no route to the clients, so everything it publishes vanishes without an error.
A request that finished meanwhile would never be answered although it ran.

:class:`ReplyOutbox` keeps the client replies of the last ``keep_s`` seconds. When the
worker loses *contact* (its NATS connection is down, or its heartbeat has not reached the
store for a while: the shell decides), the replies published since shortly before the last
confirmed contact, and everything published until contact is back, are kept for a re-send
``grace_s`` after contact returns (time for clients to resubscribe). The router may have
called the worker silent meanwhile and run some of its requests elsewhere, revoking them
first (``services/router/revocations.py``); so the re-send takes the revocations read at
that moment and drops every reply of a request revoked after this worker accepted it
(:meth:`ReplyOutbox.take_due`): its client's answer comes from the worker that ran it again.

A client sees each kept reply at most twice, unchanged: chunks carry token indices and a
repeated completion is the same message, so a client can drop repeats (``loadgen.replay``
does; the gateway has closed the request by then). Pure: the worker shell feeds it the
clock, the contact state and the revocations.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass

from services.worker.revoked import revoked_since

__all__ = [
    "ORIGINS_MAX",
    "PENDING_MAX",
    "RESEND_GRACE_S",
    "RESEND_KEEP_S",
    "RESEND_WINDOW_S",
    "OutboxEntry",
    "ReplyOutbox",
]

RESEND_WINDOW_S = 1.0
"""Replies published this long before the last confirmed contact are sent again too."""
RESEND_KEEP_S = 6.0
"""Replies kept while in contact: longer than contact can take to be found lost (the
shell's threshold, a stats period and a heartbeat's Redis timeout) plus the window."""
RESEND_GRACE_S = 1.5
"""Wait after contact is back before the re-send: clients reconnect every 0.5 s."""
PENDING_MAX = 50_000
"""Replies kept for the re-send at most; beyond it the oldest go first. While NATS is down
the engine keeps producing (about 1,300 chunks/s for 64 streams at the 50 ms window), and an
outage of minutes must not grow the worker's memory without bound; the newest replies are
the ones a reconnected client can still use (a completion ends its request)."""
ORIGINS_MAX = 65_536
"""Reply subjects whose request is remembered for the revocation filter; the oldest go
first (a worker runs at most ``max_num_seqs`` requests at once, so these span minutes)."""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One reply as it was published."""

    subject: str
    payload: bytes
    headers: dict[str, str] | None
    at: float


class ReplyOutbox:
    """Recent client replies, and those to send again after contact was lost."""

    def __init__(
        self,
        window_s: float = RESEND_WINDOW_S,
        grace_s: float = RESEND_GRACE_S,
        keep_s: float = RESEND_KEEP_S,
    ) -> None:
        """Re-send what was published from ``window_s`` before the last confirmed contact,
        ``grace_s`` after contact is back; keep ``keep_s`` of replies meanwhile."""
        self._window_s = window_s
        self._grace_s = grace_s
        self._keep_s = max(keep_s, window_s)
        self._recent: deque[OutboxEntry] = deque()
        self._pending: deque[OutboxEntry] = deque(maxlen=PENDING_MAX)
        self._down = False
        self._resend_at: float | None = None
        self._origins: OrderedDict[str, tuple[str, float]] = OrderedDict()
        """Reply subject → (request id, wall time this worker accepted it)."""

    @property
    def pending(self) -> int:
        """Replies waiting for the re-send."""
        return len(self._pending)

    @property
    def in_doubt(self) -> bool:
        """Contact was lost and the re-send after it has not happened yet."""
        return self._down or self._resend_at is not None

    def owner(self, subject: str, request_id: str, accepted_at: float) -> None:
        """Note which request (stack-wide id) replies on ``subject`` belong to, and when
        this worker accepted it: what :meth:`take_due` checks against revocations."""
        self._origins[subject] = (request_id, accepted_at)
        self._origins.move_to_end(subject)
        while len(self._origins) > ORIGINS_MAX:
            self._origins.popitem(last=False)

    def revoked_ids(self, revoked: Mapping[str, float]) -> set[str]:
        """The requests of this worker (among those :meth:`owner` named) that ``revoked``
        says the router took back at or after this worker accepted them."""
        origins = self._origins.values()
        return {rid for rid, accepted_at in origins if revoked_since(revoked, rid, accepted_at)}

    def record(
        self, subject: str, payload: bytes, headers: dict[str, str] | None, now: float
    ) -> None:
        """Note one reply just published (or buffered by a reconnecting client)."""
        entry = OutboxEntry(subject, payload, headers, now)
        if self.in_doubt:
            self._pending.append(entry)
            return
        self._recent.append(entry)
        while self._recent and now - self._recent[0].at > self._keep_s:
            self._recent.popleft()

    def observe(self, in_contact: bool, now: float, confirmed_at: float) -> bool:
        """Follow the contact state; whether the re-send is due now (:meth:`take_due`).

        ``confirmed_at`` is when the last contact that succeeded began (a heartbeat that
        reached both NATS and the store): what was published more than ``window_s`` before
        it went out while the worker was in contact.
        """
        if not in_contact:
            if not self._down:
                self._down = True
                self._resend_at = None
                since = min(confirmed_at, now) - self._window_s
                self._pending.extend(e for e in self._recent if e.at >= since)
                self._recent.clear()
            return False
        if self._down:
            self._down = False
            self._resend_at = now + self._grace_s
        return self._resend_at is not None and now >= self._resend_at

    def take_due(self, revoked: Mapping[str, float]) -> tuple[list[OutboxEntry], int]:
        """The kept replies to publish again, and how many requests' replies were dropped.

        ``revoked`` maps request ids to when the router took them back from this worker
        (read after contact returned); a reply of a request revoked at or after this
        worker accepted it is not sent. Call when :meth:`observe` says the re-send is due.
        """
        self._resend_at = None
        due: list[OutboxEntry] = []
        dropped: set[str] = set()
        for entry in self._pending:
            origin = self._origins.get(entry.subject)
            if origin is not None and revoked_since(revoked, *origin):
                dropped.add(origin[0])
                continue
            due.append(entry)
        self._pending.clear()
        return due, len(dropped)
