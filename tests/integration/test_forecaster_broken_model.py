"""A region whose fitted model fails to forecast costs that region its model, not the
other regions their forecasts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pandas as pd
import pytest

from proto.codec import decode
from proto.messages import Forecast
from services.forecaster import service
from services.forecaster.models import CarbonForecaster
from services.forecaster.sources import CarbonHistory
from shared.config import ClockSettings, ForecasterSettings
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests.factories import connected_settings

pytestmark = pytest.mark.connected

HOUR_S = 3600.0


class _Broken:
    """A model that cannot forecast: say, a cached fit that older code pickled."""

    def forecast(self, *_: object) -> object:
        raise AttributeError("'CarbonForecaster' object has no attribute 'sun_features'")


async def test_a_model_that_raises_falls_back_and_the_other_regions_keep_publishing(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Test that PJM's model raising (not a ``ValueError``) neither ends the refresh before
    CISO, listed after it, is published (the periodic loop retried the same failing
    refresh for ever, and CISO was never forecast), nor leaves PJM without a forecast: PJM
    gets same-hour-yesterday, labelled so, and the failure is logged once."""

    def fits(
        histories: dict[str, CarbonHistory], source: str, cut: pd.Timestamp, _: Path | None
    ) -> Iterator[tuple[str, CarbonForecaster | ValueError]]:
        yield "PJM", cast(CarbonForecaster, _Broken())
        yield "CISO", ValueError("not fitted in this test")

    monkeypatch.setattr(service, "load_or_fit_regions", fits)
    origin = pd.Timestamp("2022-03-01", tz="UTC")
    settings = connected_settings(namespace, nats_server, redis_server).model_copy(
        update={
            "clock": ClockSettings(speedup=10 * HOUR_S, origin_model_s=origin.timestamp()),
            "forecaster": ForecasterSettings(regions=("PJM", "CISO"), refresh_s=HOUR_S),
        }
    )
    published: dict[str, list[Forecast]] = {"PJM": [], "CISO": []}
    async with service_context(service.NAME, settings) as ctx:
        for region, seen in published.items():

            async def on_forecast(msg: object, seen: list[Forecast] = seen) -> None:
                seen.append(decode(msg.data, Forecast))  # type: ignore[attr-defined]

            await ctx.nc.subscribe(ctx.subjects.forecast(region), cb=on_forecast)
        task = asyncio.create_task(service.serve(ctx))
        await asyncio.sleep(2.0)
        ctx.stop.set()
        await asyncio.wait_for(task, 10)
    assert len(published["CISO"]) >= 3
    assert len(published["PJM"]) >= 3
    assert {f.model for f in published["PJM"]} == {"same-hour-yesterday"}
    failed = [r for r in caplog.records if "PJM" in r.getMessage() and r.exc_info is not None]
    assert len(failed) == 1


class _Slow:
    """A model whose forecast takes a while of CPU, as the blend's boosters do."""

    def forecast(self, *_: object) -> object:
        time.sleep(0.4)  # stands for CPU work: holds whichever thread runs it
        raise ValueError("history too short")


async def test_forecasting_runs_off_the_event_loop(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that a model's forecast does not hold the event loop (measured about 35 ms per
    region and refresh with the fitted blend, more with more regions): the service must go on
    answering NATS (pings, and in the in-process stack every other service shares its loop)
    while it forecasts."""

    def fits(
        histories: dict[str, CarbonHistory], source: str, cut: pd.Timestamp, _: Path | None
    ) -> Iterator[tuple[str, CarbonForecaster | ValueError]]:
        yield "PJM", cast(CarbonForecaster, _Slow())

    monkeypatch.setattr(service, "load_or_fit_regions", fits)
    settings = connected_settings(namespace, nats_server, redis_server).model_copy(
        update={
            "clock": ClockSettings(speedup=10 * HOUR_S),
            "forecaster": ForecasterSettings(regions=("PJM",), refresh_s=HOUR_S),
        }
    )
    gaps: list[float] = []
    async with service_context(service.NAME, settings) as ctx:
        task = asyncio.create_task(service.serve(ctx))
        last = time.perf_counter()
        for _ in range(150):  # 1.5 s: at least two slow forecasts
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
        ctx.stop.set()
        await asyncio.wait_for(task, 10)
    assert max(gaps) < 0.2
