"""Leases: a worker that was frozen does not run, stream or finish a request taken from it.

The router calls a worker silent after ``router.worker_timeout_s`` without a heartbeat and
runs its requests elsewhere. A worker that was only frozen (SIGSTOP, a stalled VM, a long
pause) knows nothing of that, and at its wake-up would finish those requests too: two
answers for one request. Two checks prevent it:

* a dispatch carries a lease (``proto/leases.py``): one read after its expiry is refused,
  for the router has given up on it (its reply timed out long before);
* :class:`LeaseGuard` watches the worker's own event loop. A gap longer than
  ``worker.lease_stale_after_s`` (the process did not run) makes every path that sends or
  starts something wait, first for ``worker.lease_settle_s`` (a router that called the
  worker silent just before it woke has written its revocations by then), then for one
  read of the worker's ``revoked`` hash (``services/router/revocations.py``). Requests
  revoked after this worker accepted them are aborted without an answer: the client's
  answer comes from the worker that runs them now.

The guard is one awaitable step (:meth:`LeaseGuard.hold`) at the top of each such path, so
whichever the event loop happens to run first after the gap (an engine iteration, a chunk
flush, a dispatch) triggers the check, and the others wait for the same check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from prometheus_client import Counter
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.worker.revoked import revoked_since
from shared.counters import ERRORS

__all__ = ["LEASE_EXPIRED", "REVOKED_ABORTED", "LeaseGuard"]

LEASE_EXPIRED: Final = Counter(
    "greenserve_worker_lease_expired_total",
    "Dispatches a worker refused because their lease had expired when it read them",
)
REVOKED_ABORTED: Final = Counter(
    "greenserve_worker_revoked_aborted_total",
    "Requests a worker aborted unanswered after a freeze: the router had revoked them",
)

logger = logging.getLogger(__name__)


class LeaseGuard:
    """Checks, after each gap in the worker's event loop, what the router revoked."""

    def __init__(
        self,
        redis: Redis,
        revoked_key: str,
        *,
        stale_after_s: float,
        settle_s: float,
        held: Callable[[], dict[str, float]],
        abort: Callable[[list[str]], Awaitable[None]],
        service: str,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Read ``revoked_key`` after gaps over ``stale_after_s``; ``held()`` gives the
        requests held (id → wall time accepted), ``abort`` ends revoked ones unanswered."""
        self._redis = redis
        self._key = revoked_key
        self._stale_after_s = stale_after_s
        self._settle_s = settle_s
        self._held = held
        self._abort = abort
        self._service = service
        self._monotonic = monotonic
        self._last = monotonic()
        """When the event loop last ran a guarded path or the beat (monotonic)."""
        self._check: asyncio.Task[None] | None = None
        self._revoked: dict[str, float] = {}
        """Revocations read at the last check (request id → wall time revoked)."""
        self.checks = 0
        """Checks run (gaps noticed, contact regained)."""
        self._forced = False
        """The next :meth:`hold` checks whatever the gap (:meth:`force`)."""

    def force(self) -> None:
        """Make the next :meth:`hold` check, as after a gap: the worker was out of contact
        with the stack (a partition), and the router may have revoked what it runs."""
        self._forced = True

    def dispatch_refusal(self, request_id: str, expires_at: float | None, lease_s: float) -> str:
        """Why a dispatch read now must not run ("" when it may).

        ``expires_at`` is its lease (None: a router without leases). A dispatch sent before
        the router revoked the same request from this worker is refused too: the router
        gave up on it and runs the request elsewhere.
        """
        if expires_at is None:
            return ""
        if time.time() > expires_at:
            LEASE_EXPIRED.inc()
            return "lease_expired"
        revoked_at = self._revoked.get(request_id)
        if revoked_at is not None and revoked_at >= expires_at - lease_s:
            LEASE_EXPIRED.inc()
            return "lease_revoked"
        return ""

    async def hold(self) -> None:
        """Return at once unless the event loop just came back from a gap; then check the
        revocations first (one check for every path that waits on it)."""
        now = self._monotonic()
        if self._check is None:
            if not self._forced and now - self._last <= self._stale_after_s:
                self._last = now
                return
            if not self._forced:
                logger.warning(
                    "event loop stalled %.1f s (frozen?): checking leases before going on",
                    now - self._last,
                )
            self._forced = False
            self._check = asyncio.create_task(self._run_check())
        # Shielded: a caller cancelled while it waits must not cancel the others' check.
        await asyncio.shield(self._check)

    async def beat(self, stop: asyncio.Event) -> None:
        """Run :meth:`hold` often enough that an idle worker's loop is never taken for
        stalled, and that a gap is noticed even when nothing else runs."""
        period = self._stale_after_s / 4.0
        self._last = self._monotonic()  # the time the worker took to start is no stall
        while not stop.is_set():
            await self.hold()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period)

    async def read_now(self) -> dict[str, float] | None:
        """Read the revocations now; abort, unanswered, the held requests revoked after
        this worker accepted them; return them all (request id → time revoked), or None
        when Redis could not be read (counted; the worker goes on)."""
        try:
            raw = await self._redis.hgetall(self._key)
        except (RedisError, OSError) as exc:
            # Unknown: going on may answer twice, aborting may lose the request.
            ERRORS.labels(self._service, "lease_check").inc()
            logger.warning("could not read revocations: %s", exc)
            return None
        self._revoked = _times(raw)
        revoked = [
            rid
            for rid, accepted_at in self._held().items()
            if revoked_since(self._revoked, rid, accepted_at)
        ]
        if revoked:
            REVOKED_ABORTED.inc(len(revoked))
            logger.warning(
                "aborting %d requests the router took back while this worker was out of reach",
                len(revoked),
            )
            await self._abort(revoked)
        return dict(self._revoked)

    async def _run_check(self) -> None:
        try:
            await asyncio.sleep(self._settle_s)
            self.checks += 1
            await self.read_now()
        finally:
            self._last = self._monotonic()
            self._check = None


def _times(raw: dict[bytes | str, bytes | str]) -> dict[str, float]:
    """Request id → revocation time of a ``revoked`` hash; malformed entries are skipped
    (and counted): one bad field must not keep the others from being honoured."""
    out: dict[str, float] = {}
    for key, value in raw.items():
        rid = key.decode(errors="replace") if isinstance(key, bytes) else key
        try:
            out[rid] = float(value)
        except ValueError:
            ERRORS.labels("worker", "malformed").inc()
            logger.warning("revocation of %s is not a time: %r", rid, value[:40])
    return out
