"""Live mode (services/forecaster/live.py) against a local stand-in of the providers' APIs
(tests/provider_standin.py: each API's documented shape, on the wall clock)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import numpy as np
import pandas as pd
import pytest

from services.forecaster.api_clients import EIA_FUEL_FACTORS, EiaClient
from services.forecaster.live import LIVE_FALLBACKS, aligned_history, feed_for
from services.forecaster.models import CarbonForecaster
from services.forecaster.service import live_message
from services.forecaster.sources import CarbonHistory
from shared.zones import LiveProvider, Zone
from tests.provider_standin import (
    EIA_FUELS,
    EIA_KEY,
    EM_KEY,
    WT_PASSWORD,
    WT_USER,
    eia_mw,
    em_value,
    provider_standin,
)

HOUR = pd.Timedelta(hours=1)
ENV = {
    "ELECTRICITYMAPS_API_KEY": EM_KEY,
    "EIA_API_KEY": EIA_KEY,
    "WATTTIME_USERNAME": WT_USER,
    "WATTTIME_PASSWORD": WT_PASSWORD,
}


def _zone(provider: str, code: str = "SYN", source: str = "em") -> Zone:
    return Zone(
        source=source,  # type: ignore[arg-type]
        code=code,
        files=(Path("unused.csv"),),
        timezone=None,
        holidays="none",
        live_provider=provider,  # type: ignore[arg-type]
        live_code=code,
    )


async def test_the_eia_client_turns_fuel_rows_into_intensity_across_pages() -> None:
    """Test the EIA v2 client: rows paged 7 at a time are all read, and each hour's
    intensity is the factor-weighted mean of its fuels (the reference files' formula)."""
    async with provider_standin() as standin, aiohttp.ClientSession() as session:
        standin.eia_page_rows = 7
        client = EiaClient(session, "ERCO", EIA_KEY, base_url=standin.url)
        end = pd.Timestamp.now(tz="UTC").floor("h")
        history = await client.history((end - 5 * HOUR).to_pydatetime(), end.to_pydatetime())
    assert standin.calls["eia"] == int(np.ceil(6 * len(EIA_FUELS) / 7))
    assert len(history.intensity) == 6
    hour = history.intensity.index[2]
    mw = {fuel: eia_mw(hour, fuel) for fuel in EIA_FUELS}
    expected = sum(round(v) * EIA_FUEL_FACTORS[f] for f, v in mw.items()) / sum(
        round(v) for v in mw.values()
    )
    assert history.intensity.iloc[2] == pytest.approx(expected)
    assert history.generation is not None
    assert list(history.generation.columns) == list(EIA_FUEL_FACTORS)


def test_the_file_history_moves_by_whole_weeks_to_meet_the_live_hours(
    history: CarbonHistory,
) -> None:
    """Test that the 2023 history, moved to end just before the live hours, keeps every
    value on its hour of the week, and that the live hours follow it."""
    origin = pd.Timestamp.now(tz="UTC").floor("h")
    recent_index = pd.date_range(origin - 48 * HOUR, origin - HOUR, freq="h")
    recent = CarbonHistory(
        region="SYN",
        intensity=pd.Series(123.0, index=recent_index),
        fuel_mix=None,
        signal="average",
        emission_factor="direct",
        source="stand-in",
    )
    moved = aligned_history(history, recent, origin)
    assert moved.intensity.index[-1] == origin - HOUR
    assert (moved.intensity.loc[recent_index[0] :] == 123.0).all()
    before = moved.intensity.loc[: recent_index[0] - HOUR]
    week = pd.Timedelta(days=7)
    weeks = -(-(recent_index[0] - HOUR - history.intensity.index[-1]) // week)
    source = pd.DatetimeIndex(before.index - weeks * week)
    moved_index = pd.DatetimeIndex(before.index)
    assert before.to_numpy() == pytest.approx(history.intensity.loc[source].to_numpy())
    assert (moved_index.day_of_week == source.day_of_week).all()
    assert (moved_index.hour == source.hour).all()
    alone = aligned_history(history, None, origin)
    assert alone.intensity.index[-1] == origin - HOUR


async def test_live_forecasts_are_the_provider_s_on_the_wall_clock(
    history: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test Electricity Maps: the forecast starts at the current hour, is issued now,
    carries the provider's values and says it is live without a fallback."""
    async with provider_standin() as standin, aiohttp.ClientSession() as session:
        feed = feed_for(
            _zone("electricitymaps"), session, 24, {"electricitymaps": standin.url}, environ=ENV
        )
        await feed.poll_once()
    assert feed.error is None
    now = time.time()
    origin = pd.Timestamp(now, unit="s", tz="UTC").floor("h")
    message = live_message(feed, history, fitted, origin, 24, now)
    assert (message.mode, message.fallback) == ("live", "")
    assert message.issued_at == now
    assert message.start_s == origin.timestamp()
    hours = pd.date_range(origin, periods=24, freq="h")
    assert message.values == pytest.approx([em_value(t) for t in hours])
    assert message.model == "electricitymaps forecast"
    assert all(
        lo <= v <= hi for lo, v, hi in zip(message.p10, message.values, message.p90, strict=True)
    )


async def test_eia_data_feeds_the_model_and_watttime_is_marginal(
    history: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test that with EIA (no provider forecast) the forecast is the model's on the live
    hours, and that WattTime's forecast comes through as a marginal signal in g/kWh."""
    async with provider_standin() as standin, aiohttp.ClientSession() as session:
        urls: dict[LiveProvider, str] = {"eia": standin.url, "watttime": standin.url}
        eia = feed_for(_zone("eia"), session, 24, urls, environ=ENV)
        watttime = feed_for(_zone("watttime"), session, 24, urls, environ=ENV)
        await eia.poll_once()
        await watttime.poll_once()
    now = time.time()
    origin = pd.Timestamp(now, unit="s", tz="UTC").floor("h")
    from_eia = live_message(eia, history, fitted, origin, 24, now)
    assert from_eia.fallback == ""
    assert from_eia.model.endswith("on eia data")
    marginal = live_message(watttime, history, fitted, origin, 24, now)
    assert marginal.signal == "marginal"
    assert marginal.model == "watttime forecast"
    assert marginal.values[0] == pytest.approx(
        np.mean([900.0 + 100.0 * (origin.hour % 3)] * 12) * 0.45359237
    )


async def test_an_outage_falls_back_to_the_model_and_says_so(
    history: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test a provider answering 503 and one without credentials: each forecast is the
    model's, dated at the wall-clock hour, with the reason in ``fallback``, counted."""
    async with provider_standin() as standin, aiohttp.ClientSession() as session:
        standin.down.add("electricitymaps")
        feed = feed_for(
            _zone("electricitymaps"), session, 24, {"electricitymaps": standin.url}, environ=ENV
        )
        await feed.poll_once()
        keyless = feed_for(_zone("eia"), session, 24, {"eia": standin.url}, environ={})
    assert feed.error is not None
    assert "503" in feed.error
    before = LIVE_FALLBACKS.labels("SYN", "electricitymaps")._value.get()
    now = time.time()
    origin = pd.Timestamp(now, unit="s", tz="UTC").floor("h")
    message = live_message(feed, history, fitted, origin, 24, now)
    assert message.fallback.startswith("electricitymaps unavailable (CarbonApiError")
    assert message.model == fitted.forecast(aligned_history(history, None, origin), origin).model
    assert message.start_s == origin.timestamp()
    assert LIVE_FALLBACKS.labels("SYN", "electricitymaps")._value.get() == before + 1
    assert keyless.fetch is None
    missing = live_message(keyless, history, fitted, origin, 24, now)
    assert "no credentials: set EIA_API_KEY" in missing.fallback


async def test_a_feed_polls_at_its_cadence_and_retries_sooner_after_a_failure() -> None:
    """Test the poll loop: with a 0.2 s cadence about five polls in a second; while the
    provider is down the next poll waits the shorter of the cadence and the retry delay,
    and the first good answer after the outage clears the error."""
    async with provider_standin() as standin, aiohttp.ClientSession() as session:
        feed = feed_for(
            _zone("electricitymaps"),
            session,
            24,
            {"electricitymaps": standin.url},
            {"electricitymaps": 0.2},
            environ=ENV,
        )
        standin.down.add("electricitymaps")
        await feed.poll_once()
        assert feed.fresh(time.time()) is None
        stop = asyncio.Event()
        task = asyncio.create_task(feed.run(stop))
        await asyncio.sleep(0.5)
        standin.down.clear()
        await asyncio.sleep(0.6)
        stop.set()
        await asyncio.wait_for(task, 2)
    assert feed.error is None
    assert feed.fresh(time.time()) is not None
    assert 4 <= feed.polls <= 7
