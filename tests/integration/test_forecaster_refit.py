"""The live forecaster re-estimates its models every ``forecaster.refit_days`` of model time."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

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

DAY_S = 86_400.0


async def test_the_service_refits_on_schedule_and_keeps_forecasting(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Test, with model time running 10 days per wall second, that fits start at start-up
    and then about every 30 model days on data up to the new origin, and that the forecast
    keeps being published while they run (here every fit fails, so same-hour-yesterday),
    even past a fit that raises."""
    cuts: list[pd.Timestamp] = []

    def record(
        histories: dict[str, CarbonHistory], source: str, cut: pd.Timestamp, _: Path | None
    ) -> Iterator[tuple[str, CarbonForecaster | ValueError]]:
        cuts.append(cut)
        if len(cuts) == 2:
            raise RuntimeError("model cache unreadable")  # the service must outlive it
        for region in histories:
            yield region, ValueError("not fitted in this test")

    monkeypatch.setattr(service, "load_or_fit_regions", record)
    origin = pd.Timestamp("2022-03-01", tz="UTC")
    settings = connected_settings(namespace, nats_server, redis_server).model_copy(
        update={
            "clock": ClockSettings(speedup=10 * DAY_S, origin_model_s=origin.timestamp()),
            "forecaster": ForecasterSettings(regions=("PJM",), refresh_s=DAY_S, refit_days=30),
        }
    )
    async with service_context(service.NAME, settings) as ctx:
        published: list[Forecast] = []

        async def on_forecast(msg: object) -> None:
            published.append(decode(msg.data, Forecast))  # type: ignore[attr-defined]

        await ctx.nc.subscribe(ctx.subjects.forecast("PJM"), cb=on_forecast)
        task = asyncio.create_task(service.serve(ctx))
        await asyncio.sleep(9.5)  # about 95 model days
        ctx.stop.set()
        await asyncio.wait_for(task, 10)
    assert len(cuts) >= 3
    # The clock runs from when the context opened: the start-up fit cuts near the origin.
    assert origin - pd.Timedelta(hours=1) <= cuts[0] < origin + pd.Timedelta(days=3)
    gaps = [later - earlier for earlier, later in itertools.pairwise(cuts)]
    assert all(pd.Timedelta(days=30) <= gap < pd.Timedelta(days=33) for gap in gaps)
    assert published
    assert {f.model for f in published} == {"same-hour-yesterday"}
    failed = [r for r in caplog.records if "failed; keeping the current models" in r.message]
    assert len(failed) == 1
    assert failed[0].exc_info is not None
