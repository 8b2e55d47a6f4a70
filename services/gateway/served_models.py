"""The models being served right now, from the workers' own announcements.

Every worker announces its model in the stats it publishes as its heartbeat
(``WorkerStats.model``, every ``worker.stats_period_s``). The gateway keeps, per worker,
the model and when it last heard it; a worker silent for its registration's TTL
(``worker.heartbeat_ttl_s``) no longer counts, as its Redis registration has expired by
then. ``GET /v1/models`` lists what is left (``services/gateway/model_routes.py``).

At start the registrations already in Redis are read once, so a gateway started next to a
running fleet lists its models at once rather than after the first heartbeats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from nats.aio.msg import Msg
from redis.asyncio import Redis
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode
from proto.keys import Keys
from proto.messages import WorkerStats
from shared.counters import ERRORS
from shared.store import as_bytes

__all__ = ["ServedModels"]

logger = logging.getLogger(__name__)

_SERVICE = "gateway"


class ServedModels:
    """Worker → (model, last heard); the models of the workers heard within the TTL."""

    def __init__(self, ttl_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        """Forget a worker ``ttl_s`` seconds of ``monotonic`` after its last heartbeat."""
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._workers: dict[str, tuple[str, float]] = {}

    def heard(self, stats: WorkerStats) -> None:
        """Note a heartbeat."""
        self._workers[stats.worker_id] = (stats.model, self._monotonic())

    def models(self) -> list[str]:
        """The models served now, sorted; forgets the workers gone silent."""
        cutoff = self._monotonic() - self._ttl_s
        for worker_id in [w for w, (_, at) in self._workers.items() if at < cutoff]:
            del self._workers[worker_id]
        return sorted({model for model, _ in self._workers.values()})

    def serves(self, model: str) -> bool:
        """Whether a live worker serves ``model``."""
        return model in self.models()

    async def on_message(self, msg: Msg) -> None:
        """A worker's stats from the bus; a malformed one is counted and skipped."""
        try:
            self.heard(decode(msg.data, WorkerStats))
        except DecodeError as exc:
            ERRORS.labels(_SERVICE, "malformed").inc()
            logger.warning("malformed worker stats on %s: %s", msg.subject, exc)

    async def seed(self, redis: Redis, keys: Keys) -> None:
        """Take the registrations in Redis now (best effort: heartbeats follow anyway).

        A secured gateway may not read the worker registry, and Redis may be away: then the
        list fills from the heartbeats alone, within one stats period.
        """
        try:
            names = [k async for k in redis.scan_iter(match=keys.worker_pattern)]
            raws = await redis.mget(names) if names else []
        except (RedisError, OSError) as exc:
            logger.info("worker registry not read (%s); models come from heartbeats", exc)
            return
        for raw in raws:
            if raw:
                try:
                    self.heard(decode(as_bytes(raw), WorkerStats))
                except DecodeError:
                    ERRORS.labels(_SERVICE, "malformed").inc()
