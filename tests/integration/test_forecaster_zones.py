"""Zones by configuration and the two forecaster modes, end to end: the forecaster of a stack
``--regions eia:ERCO,em:KR`` beside the gateway's Carbon Aware SDK endpoint, on real NATS and
Redis, with ERCO and KR files (small synthetic ones in the real formats) in a data dir."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pandas as pd
import pytest

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, stack_launches
from services.gateway.service import open_gateway
from shared.config import GatewaySettings
from shared.paths import DATA_DIR_ENV
from shared.servers import ServerProcess
from tests.provider_standin import EIA_KEY, EM_KEY, em_value, provider_standin
from tests.zone_files import write_eia_csv, write_em_csv

pytestmark = pytest.mark.connected

URL = "/emissions/forecasts/current"


@pytest.fixture
def zone_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ERCO (EIA-930 format) and KR, JP (Electricity Maps format), 20 days each: too short
    for a fitted model, so the forecasts are the reference model's and no fit runs long."""
    write_eia_csv(tmp_path, "ERCO", "2022-06-01", 24 * 20)
    write_em_csv(tmp_path, "KR", 2022, 24 * 20)
    write_em_csv(tmp_path, "JP", 2022, 24 * 20)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    return tmp_path


@asynccontextmanager
async def _forecaster_and_gateway(
    spec: StackSpec,
) -> AsyncIterator[aiohttp.ClientSession]:
    launches = [la for la in stack_launches(spec) if la.module == "services.forecaster"]
    async with (
        run_in_process(launches),
        open_gateway(launches[0].settings, GatewaySettings(port=0)) as gateway,
        aiohttp.ClientSession(gateway.url) as http,
    ):
        yield http


async def _answer(http: aiohttp.ClientSession, params: list[tuple[str, str]]) -> list[Any]:
    """The endpoint's answer once every location has a forecast (404 until then)."""
    deadline = time.monotonic() + 30.0
    while True:
        async with http.get(URL, params=params) as response:
            status, body = response.status, await response.json()
        if status == 200 or time.monotonic() > deadline:
            break
        assert status == 404, body
        await asyncio.sleep(0.2)
    assert status == 200, body
    assert isinstance(body, list)
    return body


async def test_a_stack_of_eia_erco_and_em_kr_replays_and_answers_by_zone_name(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str, zone_data: Path
) -> None:
    """Test that the forecaster of ``--regions eia:ERCO,em:KR`` publishes both, and that the
    SDK endpoint answers ``location=eia:ERCO`` and ``em:KR`` as a replay: generatedAt is the
    data's hour (2022), not the wall clock, and the answer says so."""
    origin = pd.Timestamp("2022-06-15 12:00", tz="UTC")
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=2,
        regions=("eia:ERCO", "em:KR"),
        origin_wall_s=time.time(),
        extra={"clock": {"origin_model_s": origin.timestamp()}, "shutdown_timeout_s": 1.0},
    )
    async with _forecaster_and_gateway(spec) as http:
        erco, kr = await _answer(http, [("location", "eia:ERCO"), ("location", "em:KR")])
    assert (erco["location"], erco["mode"], kr["mode"]) == ("eia:ERCO", "replay", "replay")
    assert erco["generatedAt"] == erco["dataStartAt"] == "2022-06-15T12:00:00Z"
    assert erco["forecastData"][0]["timestamp"] == "2022-06-15T12:00:00Z"
    # KR's data is 2022's first 20 days: the clock is past it, so the replay answers from
    # the data's end, and says which hour that is.
    assert kr["generatedAt"] == kr["dataStartAt"] == "2022-01-21T00:00:00Z"
    assert kr["forecastData"]


async def test_live_answers_agree_with_the_wall_clock_and_an_outage_is_labelled(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    zone_data: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test live mode against the provider stand-in: ERCO from the EIA API, KR from
    Electricity Maps, JP from WattTime, which is down. ``generatedAt``, ``dataStartAt`` and
    every timestamp agree with the wall clock; KR's values are the provider's; a query from
    now gets windows from now; JP's answer is the model's, with the outage in
    ``fallback``."""
    monkeypatch.setenv("EIA_API_KEY", EIA_KEY)
    monkeypatch.setenv("ELECTRICITYMAPS_API_KEY", EM_KEY)
    monkeypatch.setenv("WATTTIME_USERNAME", "wt-user")
    monkeypatch.setenv("WATTTIME_PASSWORD", "wt-pass")
    async with provider_standin() as standin:
        standin.down.add("watttime")
        spec = StackSpec(
            namespace=namespace,
            nats_url=nats_server.url,
            redis_url=redis_server.url,
            workers=3,
            regions=("eia:ERCO", "em:KR", "em:JP"),
            origin_wall_s=time.time(),
            extra={
                "forecaster": {
                    "mode": "live",
                    "live_urls": dict.fromkeys(("eia", "electricitymaps", "watttime"), standin.url),
                    "zones": {"em:JP": {"live_provider": "watttime", "live_code": "JP_TK"}},
                },
                "shutdown_timeout_s": 1.0,
            },
        )
        async with _forecaster_and_gateway(spec) as http:
            now = time.time()
            names = [("location", n) for n in ("eia:ERCO", "em:KR", "em:JP")]
            erco, kr, jp = await _answer(http, [*names, ("windowSize", "60")])
            from_now = pd.Timestamp(time.time(), unit="s", tz="UTC").floor("min")
            [windows] = await _answer(
                http,
                [
                    ("location", "em:KR"),
                    ("dataStartAt", from_now.isoformat()),
                    ("windowSize", "90"),
                ],
            )
    hour = pd.Timestamp(now, unit="s", tz="UTC").floor("h")
    for answer in (erco, kr, jp):
        assert answer["mode"] == "live"
        generated = pd.Timestamp(answer["generatedAt"]).timestamp()
        assert abs(generated - now) < 120, answer["generatedAt"]
        assert pd.Timestamp(answer["dataStartAt"]) == hour
        stamps = [pd.Timestamp(p["timestamp"]) for p in answer["forecastData"]]
        assert stamps[0] == hour
        assert all(hour <= t <= hour + pd.Timedelta(hours=24) for t in stamps)
    assert "fallback" not in erco
    assert "fallback" not in kr
    assert [p["value"] for p in kr["forecastData"][:3]] == pytest.approx(
        [em_value(hour + pd.Timedelta(hours=i)) for i in range(3)]
    )
    assert jp["fallback"].startswith("watttime unavailable (CarbonApiError: watttime API error 503")
    assert windows["forecastData"][0]["timestamp"] == from_now.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert windows["optimalDataPoints"]
    assert standin.calls["eia"] >= 1
    assert standin.calls["em_forecast"] >= 1
