"""Which placed requests did their workers end? The placement records, and a lookup of them
in the workers' ended records.

Endings reach the bookkeeping as ``request.done`` events on core NATS: at most once. A
subscriber that is disconnected (a nats-server restart, a slow-consumer cut) or not running
(a scheduler killed and restarted) when a request ends never hears of it, and keeps the
request as placed: the router holds its slot on the worker for good, the scheduler its
``dispatched`` record, which a restarted router would adopt and dispatch again. Every worker
also records what it ended in Redis (:mod:`services.worker.ended_log`), so the router and
the scheduler audit what they still hold against that record, and a restarted router
checks it before adopting.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode
from proto.keys import Keys
from proto.messages import Assignment
from shared.store import as_bytes

__all__ = ["ended_among", "placement_records"]

logger = logging.getLogger(__name__)


async def placement_records(redis: Redis, keys: Keys) -> list[Assignment]:
    """Every record of ``dispatched`` that decodes, placed or pulled-but-unplaced
    (``UNPLACED_WORKER``); one HGETALL.

    Raises:
        RedisError: the hash could not be read.
    """
    records: list[Assignment] = []
    for raw in (await redis.hgetall(keys.dispatched)).values():
        try:
            records.append(decode(as_bytes(raw), Assignment))
        except DecodeError:
            continue  # a record no version of ours wrote: nothing to act on
    return records


async def ended_among(
    redis: Redis, keys: Keys, placed: Iterable[tuple[str, str]]
) -> set[str] | None:
    """The request ids among ``(request id, worker id)`` pairs that their worker's record
    names as ended; None when Redis could not be read (unknown: the caller decides).

    One ZMSCORE per worker, all in one round trip.
    """
    by_worker: dict[str, list[str]] = {}
    for request_id, worker_id in placed:
        by_worker.setdefault(worker_id, []).append(request_id)
    if not by_worker:
        return set()
    pipe = redis.pipeline(transaction=False)
    for worker_id, request_ids in by_worker.items():
        pipe.zmscore(keys.ended(worker_id), request_ids)
    try:
        scores = await pipe.execute()
    except RedisError as exc:
        logger.warning("could not read the workers' ended records: %s", exc)
        return None
    return {
        request_id
        for request_ids, found in zip(by_worker.values(), scores, strict=True)
        for request_id, score in zip(request_ids, found, strict=True)
        if score is not None
    }
