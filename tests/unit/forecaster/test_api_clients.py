"""Tests of the Electricity Maps and WattTime clients against a local server in their format."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from services.forecaster.api_clients import (
    LB_PER_MWH_TO_G_PER_KWH,
    CarbonApiError,
    ElectricityMapsClient,
    WattTimeClient,
)
from services.forecaster.sources import CarbonSource

EM_KEY = "em-secret"
WT_USER, WT_PASSWORD = "user", "pass"


def _em_point(stamp: str, value: float) -> dict[str, object]:
    return {
        "zone": "DE",
        "carbonIntensity": value,
        "datetime": stamp,
        "updatedAt": stamp,
        "createdAt": stamp,
        "emissionFactorType": "lifecycle",
        "isEstimated": False,
        "estimationMethod": None,
    }


async def _em_history(request: web.Request) -> web.Response:
    if request.headers.get("auth-token") != EM_KEY:
        return web.json_response({"error": "bad token"}, status=401)
    rows = [_em_point(f"2024-05-01T{h:02d}:00:00.000Z", 100.0 + h) for h in range(3)]
    return web.json_response({"zone": request.query["zone"], "history": rows})


async def _em_past_range(request: web.Request) -> web.Response:
    assert request.query["start"] == "2024-05-01T00:00:00Z"
    assert request.query["emissionFactorType"] == "lifecycle"
    rows = [_em_point(f"2024-05-01T{h:02d}:00:00.000Z", 200.0) for h in range(5)]
    return web.json_response({"zone": "DE", "data": rows, "temporalGranularity": "hourly"})


async def _em_forecast(request: web.Request) -> web.Response:
    rows = [
        {"carbonIntensity": 50.0 + h, "datetime": f"2024-05-02T{h:02d}:00:00.000Z"}
        for h in range(24)
    ]
    return web.json_response({"zone": "DE", "forecast": rows, "updatedAt": "2024-05-01"})


class WattTimeFake:
    """WattTime v3 stand-in: basic-auth login, bearer tokens that can be revoked."""

    def __init__(self) -> None:
        self.logins = 0
        self.valid_token = ""

    async def login(self, request: web.Request) -> web.Response:
        expected = base64.b64encode(f"{WT_USER}:{WT_PASSWORD}".encode()).decode()
        if request.headers.get("Authorization") != f"Basic {expected}":
            return web.json_response({"error": "bad login"}, status=403)
        self.logins += 1
        self.valid_token = f"token-{self.logins}"
        return web.json_response({"token": self.valid_token})

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.valid_token}"

    async def historical(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"error": "expired"}, status=401)
        # 5-minute MOER points: 12 at 1000 lb/MWh in hour 0, 12 at 500 in hour 1
        points = [
            {
                "point_time": f"2024-05-01T{m // 60:02d}:{m % 60:02d}:00+00:00",
                "value": 1000.0 if m < 60 else 500.0,
            }
            for m in range(0, 120, 5)
        ]
        meta = {
            "region": request.query["region"],
            "signal_type": "co2_moer",
            "units": "lbs_co2_per_mwh",
            "data_point_period_seconds": 300,
        }
        return web.json_response({"data": points, "meta": meta})

    async def forecast(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"error": "expired"}, status=401)
        points = [
            {"point_time": f"2024-05-01T00:{m:02d}:00+00:00", "value": 800.0}
            for m in range(0, 60, 5)
        ]
        meta = {
            "region": "CAISO_NORTH",
            "signal_type": "co2_moer",
            "units": "lbs_co2_per_mwh",
            "generated_at": "2024-05-01T00:00:00+00:00",
            "model": {"date": "2024-01-01"},
        }
        return web.json_response({"data": points, "meta": meta})

    async def signal_index(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"error": "expired"}, status=401)
        return web.json_response(
            {
                "data": [{"point_time": "2024-05-01T00:00:00+00:00", "value": 37.0}],
                "meta": {"units": "percentile"},
            }
        )


@pytest.fixture
async def fake() -> WattTimeFake:
    """The WattTime fake's state."""
    return WattTimeFake()


@pytest.fixture
async def server(fake: WattTimeFake) -> AsyncIterator[TestServer]:
    """A local server on port 0 speaking both providers' formats."""
    app = web.Application()
    app.router.add_get("/v3/carbon-intensity/history", _em_history)
    app.router.add_get("/v3/carbon-intensity/past-range", _em_past_range)
    app.router.add_get("/v3/carbon-intensity/forecast", _em_forecast)
    app.router.add_get("/login", fake.login)
    app.router.add_get("/v3/historical", fake.historical)
    app.router.add_get("/v3/forecast", fake.forecast)
    app.router.add_get("/v3/signal-index", fake.signal_index)
    test_server = TestServer(app, port=0)
    await test_server.start_server()
    try:
        yield test_server
    finally:
        await test_server.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """One client session, closed after the test."""
    async with aiohttp.ClientSession() as client_session:
        yield client_session


async def test_electricity_maps_client_reads_history_and_forecast(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    """Test that the Electricity Maps client sends its token and parses history/forecast."""
    client = ElectricityMapsClient(session, "DE", EM_KEY, base_url=str(server.make_url("/")))
    assert isinstance(client, CarbonSource)
    latest = await client.latest_history()
    assert latest.intensity.tolist() == [100.0, 101.0, 102.0]
    assert (latest.signal, latest.emission_factor) == ("average", "lifecycle")
    ranged = await client.history(datetime(2024, 5, 1), datetime(2024, 5, 2))
    assert len(ranged.intensity) == 5
    forecast = await client.provider_forecast()
    assert forecast.iloc[-1] == 73.0


async def test_electricity_maps_client_raises_on_a_bad_key(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    """Test that an HTTP 401 becomes a CarbonApiError carrying the status."""
    client = ElectricityMapsClient(session, "DE", "wrong", base_url=str(server.make_url("/")))
    with pytest.raises(CarbonApiError) as caught:
        await client.latest_history()
    assert caught.value.status == 401


async def test_watttime_client_logs_in_converts_units_and_averages_hours(
    server: TestServer, session: aiohttp.ClientSession, fake: WattTimeFake
) -> None:
    """Test that WattTime MOER in lb/MWh comes back as hourly gCO2/kWh, marginal, direct."""
    client = WattTimeClient(
        session, "CAISO_NORTH", WT_USER, WT_PASSWORD, base_url=str(server.make_url("/"))
    )
    history = await client.history(
        datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 1, 2, tzinfo=UTC)
    )
    assert history.intensity.tolist() == pytest.approx(
        [1000 * LB_PER_MWH_TO_G_PER_KWH, 500 * LB_PER_MWH_TO_G_PER_KWH]
    )
    assert (history.signal, history.emission_factor) == ("marginal", "direct")
    assert await client.signal_index() == 37.0
    assert fake.logins == 1


async def test_watttime_client_logs_in_again_when_the_token_expires(
    server: TestServer, session: aiohttp.ClientSession, fake: WattTimeFake
) -> None:
    """Test that a 401 triggers exactly one fresh login and the call then succeeds."""
    client = WattTimeClient(
        session, "CAISO_NORTH", WT_USER, WT_PASSWORD, base_url=str(server.make_url("/"))
    )
    await client.login()
    fake.valid_token = "revoked-by-server"
    forecast = await client.provider_forecast()
    assert forecast.iloc[0] == pytest.approx(800 * LB_PER_MWH_TO_G_PER_KWH)
    assert fake.logins == 2


async def test_watttime_client_reports_a_refused_login(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    """Test that wrong credentials raise CarbonApiError with the login's status."""
    client = WattTimeClient(
        session, "CAISO_NORTH", WT_USER, "nope", base_url=str(server.make_url("/"))
    )
    with pytest.raises(CarbonApiError) as caught:
        await client.signal_index()
    assert caught.value.status == 403
