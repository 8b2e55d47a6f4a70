"""The recent band's issued-forecast log survives a forecaster restart, on a real Redis."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from proto.keys import Keys
from services.forecaster.bands import IssuedForecasts
from services.forecaster.issued_store import load_issued, save_issued
from services.forecaster.models import CarbonForecast
from services.forecaster.sources import CarbonHistory
from shared.config import RedisSettings
from shared.servers import ServerProcess
from shared.store import connect_redis
from tests.factories import intensity_history

pytestmark = pytest.mark.connected

START = pd.Timestamp("2024-03-01", tz="UTC")
H = 24


def _history(days: int) -> CarbonHistory:
    rng = np.random.default_rng(5)
    return intensity_history(300.0 * np.exp(rng.normal(0.0, 0.1, (days + 2) * 24)), START)


def _forecast(day: int) -> CarbonForecast:
    values = tuple(300.0 + (day % 3) for _ in range(H))
    return CarbonForecast(
        region="SYN",
        issued_at=START + pd.Timedelta(days=day),
        step_s=3600,
        values=values,
        p10=tuple(v * 0.9 for v in values),
        p90=tuple(v * 1.1 for v in values),
        signal="average",
        emission_factor="lifecycle",
        model="test",
    )


async def test_a_restarted_forecaster_bands_as_if_it_had_not_stopped(
    redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a log saved forecast by forecast and loaded into a fresh one gives the
    same band at the next origin as the log that never stopped, and that what the window
    drops is deleted from the store too."""
    store = connect_redis(RedisSettings(url=redis_server.url))
    key = Keys(namespace).forecast_log("SYN")
    history = _history(40)
    running = IssuedForecasts()
    try:
        for day in range(35):
            before = set(running.entries())
            running.banded(_forecast(day), history)
            await save_issued(store, key, running, before)
        assert await store.hlen(key) == len(running) == 29  # 28 days back and today
        restarted = IssuedForecasts()
        assert await load_issued(store, key, restarted) == 29
        kept = running.banded(_forecast(35), history)
        again = restarted.banded(_forecast(35), history)
        assert again.p10 == kept.p10
        assert again.p90 == kept.p90
        assert again.p10 != _forecast(35).p10  # the recent band, not the one passed in
    finally:
        await store.aclose()


async def test_an_unreadable_log_costs_the_band_s_history_and_nothing_else(
    redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a key of the wrong type loads nothing and saves nothing without raising,
    and that one corrupt field is skipped while the others load."""
    store = connect_redis(RedisSettings(url=redis_server.url))
    keys = Keys(namespace)
    try:
        await store.set(keys.forecast_log("WRONG"), b"not a hash")
        log = IssuedForecasts()
        assert await load_issued(store, keys.forecast_log("WRONG"), log) == 0
        log.banded(_forecast(0), _history(2))
        await save_issued(store, keys.forecast_log("WRONG"), log, set())  # no raise
        mixed = keys.forecast_log("MIXED")
        one_float = b"\x91\xcb" + bytes(8)  # MessagePack [0.0]
        await store.hset(mixed, mapping={"470000": b"\xc1garbage", "470024": one_float})
        await store.hset(mixed, "not-an-hour", b"\x90")
        fresh = IssuedForecasts()
        assert await load_issued(store, mixed, fresh) == 1
        assert list(fresh.entries()) == [470024]
    finally:
        await store.aclose()
