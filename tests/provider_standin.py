"""A local stand-in for the carbon providers' APIs, answering in each one's documented shape.

Shapes (fields and nesting as the providers document them; values are made up here, on the
wall clock, so a live forecaster sees current data):

- Electricity Maps v3 (https://docs.electricitymaps.com/ , "carbon-intensity/past-range"
  and "carbon-intensity/forecast"; auth header ``auth-token``):
  ``{"zone", "data": [{"zone", "carbonIntensity", "datetime", "updatedAt", "createdAt",
  "emissionFactorType", "isEstimated", "estimationMethod"}], "temporalGranularity"}`` and
  ``{"zone", "forecast": [{"carbonIntensity", "datetime"}], "updatedAt"}``.
- WattTime v3 (https://docs.watttime.org/ , ``/login``, ``/v3/historical``,
  ``/v3/forecast``): ``{"token"}``; ``{"data": [{"point_time", "value"}], "meta":
  {"region", "signal_type", "units": "lbs_co2_per_mwh", "data_point_period_seconds",
  "generated_at", ...}}``.
- EIA API v2 (https://www.eia.gov/opendata/documentation.php ; the route
  ``electricity/rto/fuel-type-data`` as summarised in intermittentnrg/intermittent-docs
  EIA.md: ``period`` "YYYY-MM-DDTHH" hour beginning UTC, ``respondent``, ``fueltype``,
  ``value`` MW, 5000 rows a page with ``offset``): ``{"response": {"total", "dateFormat",
  "frequency", "data": [{"period", "respondent", "respondent-name", "fueltype",
  "type-name", "value", "value-units"}], "description"}, "request": {...}, "apiVersion"}``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from aiohttp import web
from aiohttp.test_utils import TestServer

__all__ = ["EIA_KEY", "EM_KEY", "WT_PASSWORD", "WT_USER", "StandIn", "provider_standin"]

EM_KEY = "em-key"
EIA_KEY = "eia-key"
WT_USER, WT_PASSWORD = "wt-user", "wt-pass"
EIA_FUELS = {"NG": "Natural Gas", "COL": "Coal", "NUC": "Nuclear", "SUN": "Solar", "WND": "Wind"}


def _hours(start: pd.Timestamp, end: pd.Timestamp) -> pd.DatetimeIndex:
    return pd.date_range(start.floor("h"), end.floor("h"), freq="h")


def em_value(stamp: pd.Timestamp) -> float:
    """The stand-in's Electricity Maps intensity at an hour (a daily cycle about a mean of 300)."""
    return round(300.0 + 50.0 * float(np.sin(2 * np.pi * stamp.hour / 24)), 2)


def eia_mw(stamp: pd.Timestamp, fuel: str) -> float:
    """The stand-in's EIA generation of one fuel at an hour."""
    solar = max(0.0, float(np.sin(2 * np.pi * (stamp.hour - 6) / 24)))
    return {"NG": 30000.0 - 8000.0 * solar, "COL": 8000.0, "NUC": 5000.0, "WND": 9000.0}.get(
        fuel, 10000.0 * solar
    )


@dataclass
class StandIn:
    """The stand-in's switches and counters."""

    url: str = ""
    down: set[str] = field(default_factory=set)
    """Providers answering 503 (an outage)."""
    calls: dict[str, int] = field(default_factory=dict)
    eia_page_rows: int = 5000
    """Rows per EIA page (smaller to exercise paging)."""

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _refuse(self, provider: str) -> web.Response | None:
        if provider in self.down:
            return web.json_response({"message": "service unavailable"}, status=503)
        return None

    async def em_past_range(self, request: web.Request) -> web.Response:
        self._count("em_past_range")
        if (refused := self._refuse("electricitymaps")) is not None:
            return refused
        if request.headers.get("auth-token") != EM_KEY:
            return web.json_response({"message": "Invalid auth-token"}, status=401)
        start = pd.Timestamp(request.query["start"])
        end = pd.Timestamp(request.query["end"])
        zone = request.query["zone"]
        rows = [
            {
                "zone": zone,
                "carbonIntensity": em_value(t),
                "datetime": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "updatedAt": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "createdAt": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "emissionFactorType": request.query.get("emissionFactorType", "lifecycle"),
                "isEstimated": False,
                "estimationMethod": None,
            }
            for t in _hours(start, end)
        ]
        return web.json_response({"zone": zone, "data": rows, "temporalGranularity": "hourly"})

    async def em_forecast(self, request: web.Request) -> web.Response:
        self._count("em_forecast")
        if (refused := self._refuse("electricitymaps")) is not None:
            return refused
        if request.headers.get("auth-token") != EM_KEY:
            return web.json_response({"message": "Invalid auth-token"}, status=401)
        now = pd.Timestamp.now(tz="UTC").floor("h")
        rows = [
            {"carbonIntensity": em_value(t), "datetime": t.strftime("%Y-%m-%dT%H:%M:%S.000Z")}
            for t in pd.date_range(now, periods=72, freq="h")
        ]
        return web.json_response(
            {"zone": request.query["zone"], "forecast": rows, "updatedAt": now.isoformat()}
        )

    async def wt_login(self, request: web.Request) -> web.Response:
        self._count("wt_login")
        expected = base64.b64encode(f"{WT_USER}:{WT_PASSWORD}".encode()).decode()
        if request.headers.get("Authorization") != f"Basic {expected}":
            return web.json_response({"error": "bad login"}, status=403)
        return web.json_response({"token": "wt-token"})

    def _wt_body(self, region: str, times: pd.DatetimeIndex) -> dict[str, object]:
        return {
            "data": [
                {"point_time": t.isoformat(), "value": 900.0 + 100.0 * (t.hour % 3)} for t in times
            ],
            "meta": {
                "region": region,
                "signal_type": "co2_moer",
                "units": "lbs_co2_per_mwh",
                "data_point_period_seconds": 300,
                "generated_at": pd.Timestamp.now(tz="UTC").isoformat(),
            },
        }

    async def wt_historical(self, request: web.Request) -> web.Response:
        self._count("wt_historical")
        if (refused := self._refuse("watttime")) is not None:
            return refused
        start, end = pd.Timestamp(request.query["start"]), pd.Timestamp(request.query["end"])
        times = pd.date_range(start, end, freq="5min")
        return web.json_response(self._wt_body(request.query["region"], times))

    async def wt_forecast(self, request: web.Request) -> web.Response:
        self._count("wt_forecast")
        if (refused := self._refuse("watttime")) is not None:
            return refused
        now = pd.Timestamp.now(tz="UTC").floor("5min")
        hours = int(request.query.get("horizon_hours", "24"))
        times = pd.date_range(now, periods=hours * 12, freq="5min")
        return web.json_response(self._wt_body(request.query["region"], times))

    async def eia_fuel_type(self, request: web.Request) -> web.Response:
        self._count("eia")
        if (refused := self._refuse("eia")) is not None:
            return refused
        if request.query.get("api_key") != EIA_KEY:
            return web.json_response({"error": {"code": "API_KEY_INVALID"}}, status=403)
        respondent = request.query["facets[respondent][]"]
        start = pd.Timestamp(request.query["start"], tz="UTC")
        end = pd.Timestamp(request.query["end"], tz="UTC")
        rows = [
            {
                "period": t.strftime("%Y-%m-%dT%H"),
                "respondent": respondent,
                "respondent-name": f"{respondent} (stand-in)",
                "fueltype": fuel,
                "type-name": name,
                "value": str(round(eia_mw(t, fuel))),  # EIA sends numbers as strings
                "value-units": "megawatthours",
            }
            for t in _hours(start, end)
            for fuel, name in EIA_FUELS.items()
        ]
        offset = int(request.query.get("offset", "0"))
        length = min(int(request.query.get("length", "5000")), self.eia_page_rows)
        return web.json_response(
            {
                "response": {
                    "total": str(len(rows)),
                    "dateFormat": 'YYYY-MM-DD"T"HH24',
                    "frequency": "hourly",
                    "data": rows[offset : offset + length],
                    "description": "Hourly net generation by balancing authority and source.",
                },
                "request": {"command": "/v2/electricity/rto/fuel-type-data/data/"},
                "apiVersion": "2.1.8",
            }
        )


@asynccontextmanager
async def provider_standin() -> AsyncIterator[StandIn]:
    """Serve the three providers on one local port (each under its own API paths)."""
    state = StandIn()
    app = web.Application()
    app.router.add_get("/v3/carbon-intensity/past-range", state.em_past_range)
    app.router.add_get("/v3/carbon-intensity/forecast", state.em_forecast)
    app.router.add_get("/login", state.wt_login)
    app.router.add_get("/v3/historical", state.wt_historical)
    app.router.add_get("/v3/forecast", state.wt_forecast)
    app.router.add_get("/v2/electricity/rto/fuel-type-data/data/", state.eia_fuel_type)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.url = str(server.make_url("")).rstrip("/")
    try:
        yield state
    finally:
        await server.close()
