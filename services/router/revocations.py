"""Revocations: the router records which requests it took from a worker to run elsewhere.

A worker the router calls silent (no heartbeat for ``router.worker_timeout_s``) may only be
frozen (SIGSTOP, a stalled VM, a long GC pause): its requests are re-queued and run on
another worker, and the frozen one, once it wakes, would run them to the end as well, and
its client get two answers. Before re-queueing such requests the router writes each to the
worker's ``revoked`` hash (``Keys.revoked``) with the time it took it back; a worker waking
from a gap longer than its lease check allows reads its hash and aborts those it holds,
without an answer (``services/worker/leases.py``). Written before the re-queue, so no
other worker can run a request before its revocation is readable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Final

from prometheus_client import Counter
from redis.exceptions import RedisError

from shared.counters import ERRORS
from shared.lifecycle import ServiceContext

__all__ = ["REVOKED", "REVOKED_TTL_S", "revoke"]

REVOKED_TTL_S: Final = 3600.0
"""How long a worker's revocations are kept after the last one: longer than any freeze a
worker's process survives in practice (the ingress stream keeps a request as long)."""

REVOKED: Final = Counter(
    "greenserve_router_revoked_total",
    "Requests the router took back from a silent worker to run them elsewhere",
)

logger = logging.getLogger(__name__)


async def revoke(ctx: ServiceContext, taken: Iterable[tuple[str, str]], service: str) -> None:
    """Record that the requests ``(request id, worker id)`` were taken from their workers.

    Best effort: with Redis down the requests are re-queued all the same (losing one is
    worse than a frozen worker answering it twice), and the failure is counted.
    """
    now = time.time()
    by_worker: dict[str, dict[str, str]] = {}
    for rid, worker_id in taken:
        by_worker.setdefault(worker_id, {})[rid] = f"{now:.6f}"
    if not by_worker:
        return
    pipe = ctx.redis.pipeline(transaction=False)
    for worker_id, revoked in by_worker.items():
        key = ctx.keys.revoked(worker_id)
        pipe.hset(key, mapping=revoked)  # type: ignore[arg-type]
        pipe.expire(key, int(REVOKED_TTL_S))
    count = sum(len(r) for r in by_worker.values())
    try:
        await pipe.execute()
    except RedisError as exc:
        ERRORS.labels(service, "revoke").inc(count)
        logger.warning("could not record %d revoked placements in redis: %s", count, exc)
        return
    REVOKED.inc(count)
