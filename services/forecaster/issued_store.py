"""The issued-forecast log of the recent band (:mod:`services.forecaster.bands`) in Redis.

The recent band needs the forecasts of the last 28 days as they were issued; kept only in
memory, a restart of the forecaster would fall back to the validation band for two weeks.
Each region's log is a hash (``Keys.forecast_log``): field = the hour issued at, value =
the point forecast (MessagePack list of floats). The service loads it at start and writes
what each forecast adds and drops; a store that cannot be read or written costs only the
band's history, never a forecast.
"""

from __future__ import annotations

import logging

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.forecaster.bands import IssuedForecasts
from shared.store import as_bytes

__all__ = ["load_issued", "save_issued"]

logger = logging.getLogger(__name__)

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[float]).decode


async def load_issued(store: Redis, key: str, log: IssuedForecasts) -> int:
    """Fill ``log`` from ``key``; return how many forecasts it took (0 if unreadable).

    A field that does not decode is skipped (and said), not fatal.
    """
    try:
        stored = await store.hgetall(key)
    except (RedisError, OSError) as exc:
        logger.warning("issued forecasts at %s not loaded (%s): the band starts over", key, exc)
        return 0
    taken = 0
    for field, value in stored.items():
        try:
            log.restore(int(field), _decode(as_bytes(value)))
        except (ValueError, msgspec.DecodeError):
            logger.warning("issued forecast %s:%r does not decode; skipped", key, field)
            continue
        taken += 1
    return taken


async def save_issued(store: Redis, key: str, log: IssuedForecasts, before: set[int]) -> None:
    """Write the forecasts ``log`` took since it held ``before`` (and the newest, which a
    second issue in the same hour replaces) and delete what it dropped since."""
    now = log.entries()
    changed = {hour for hour in now if hour not in before} | ({max(now)} if now else set())
    added = {str(hour): _encode(now[hour].tolist()) for hour in changed}
    dropped = [str(hour) for hour in before - set(now)]
    try:
        if added:
            await store.hset(key, mapping=added)  # type: ignore[arg-type]
        if dropped:
            await store.hdel(key, *dropped)
    except (RedisError, OSError) as exc:
        logger.warning("issued forecasts at %s not saved (%s)", key, exc)
