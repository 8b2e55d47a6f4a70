"""Noticing a Redis that lost its data, and writing back what a service holds in memory.

Redis is the services' recovery log, not their working copy: the scheduler's queues and the
router's placements live in memory and every change is recorded in Redis so a restarted
service can reload them. A Redis that restarts empty (no append-only file, or a lost disk)
erases that log while the services go on serving from memory, and a crash after that lost
what they held. Each owner keeps a marker key (``Keys.store_marker(owner)``): while it is
there nothing happens; once it is gone the owner writes back what it holds, then sets the
marker again, so a crash at any point after the write-back loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["write_back_if_lost"]

logger = logging.getLogger(__name__)


async def write_back_if_lost(
    redis: Redis, marker: str, write_back: Callable[[], Awaitable[int]]
) -> int:
    """Run ``write_back`` if ``marker`` is gone, then set it; return how much was written.

    The marker is set only after the write-back went through: a Redis that fails in between
    is found without it again at the next check. A Redis that cannot be reached is checked
    again next period (its outage is for the hand-offs and heartbeats to report).
    """
    try:
        if await redis.get(marker) is not None:
            return 0
        written = await write_back()
        await redis.set(marker, "1")
    except RedisError as exc:
        logger.debug("store check skipped: %s", exc)
        return 0
    return written
