"""Noticing a Redis that lost its data, and writing back what a service holds in memory.

Redis is the services' recovery log, not their working copy: the scheduler's queues and the
router's placements live in memory and every change is recorded in Redis so a restarted
service can reload them. A Redis that restarts empty (no append-only file, or a lost disk)
erases that log while the services go on serving from memory, and a crash after that lost
what they held. Each owner keeps a marker key (``Keys.store_marker(owner)``): while it is
there nothing happens; once it is gone the owner writes back what it holds, then sets the
marker again, so a crash at any point after the write-back loses nothing.

A failover loses less but alike: the replica the Sentinels promote has the marker, but not
the writes the primary had not yet sent it (replication is asynchronous). So the marker
holds the primary's replication id when it was set; a promoted replica starts a new id and
keeps the old one as ``master_replid2``, and a marker equal to that is a failover from the
marker's primary: the owner writes back then too. Only where Redis can fail over (the
client follows Sentinels) is ``INFO`` asked, and a refusal of it (an ACL that does not
grant it) leaves only a lost marker noticed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

__all__ = ["write_back_if_lost"]

logger = logging.getLogger(__name__)


async def write_back_if_lost(
    redis: Redis,
    marker: str,
    write_back: Callable[[], Awaitable[int]],
    *,
    follow_failover: bool = False,
) -> int:
    """Run ``write_back`` if ``marker`` is gone or Redis failed over since it was set, then
    set it; return how much was written.

    The marker is set only after the write-back went through: a Redis that fails in between
    is found without it again at the next check. A Redis that cannot be reached is checked
    again next period (its outage is for the hand-offs and heartbeats to report).
    """
    try:
        found = await redis.get(marker)
        ids = await _replication_ids(redis) if follow_failover else None
        current = ids[0] if ids else "1"
        if found is not None:
            value = found.decode() if isinstance(found, bytes) else str(found)
            if ids is None or value == current:
                return 0
            if value != ids[1]:
                # Not a failover from the marker's primary: the same data under a new id (a
                # restart that reloaded its append-only file) or a marker set without one.
                await redis.set(marker, current)
                return 0
            logger.info("redis failed over (%s was the primary's id): writing back", value)
        written = await write_back()
        await redis.set(marker, current)
    except RedisError as exc:
        logger.debug("store check skipped: %s", exc)
        return 0
    return written


async def _replication_ids(redis: Redis) -> tuple[str, str] | None:
    """The primary's replication id and the one before it (a promoted replica's former
    primary's), or None where ``INFO`` is refused."""
    try:
        info = await redis.info("replication")
    except ResponseError:  # NOPERM: the ACL grants the owner its keys' commands only
        return None
    return str(info.get("master_replid", "")), str(info.get("master_replid2", ""))
