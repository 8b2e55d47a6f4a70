"""Async clients for the public carbon-intensity APIs: Electricity Maps v3, WattTime v3, EIA v2.

Both implement :class:`~services.forecaster.sources.CarbonSource`. Formats follow the
providers' public documentation as we know it (not reachable from here, so the tests run
against a local server speaking the same JSON):

- Electricity Maps: ``GET /v3/carbon-intensity/history?zone=`` (last 24 h),
  ``/v3/carbon-intensity/past-range?zone=&start=&end=`` and ``/v3/carbon-intensity/forecast``;
  header ``auth-token``; points ``{"datetime", "carbonIntensity", "emissionFactorType",
  "isEstimated"}`` under ``history`` / ``data`` / ``forecast``. Average signal, gCO2eq/kWh.
- WattTime: ``GET /login`` with HTTP basic auth returns ``{"token"}`` (valid ~30 min);
  ``/v3/historical``, ``/v3/forecast`` and ``/v3/signal-index`` take ``region`` and
  ``signal_type`` (``co2_moer``) with ``Authorization: Bearer``; points ``{"point_time",
  "value"}`` under ``data`` with units in ``meta.units`` (``lbs_co2_per_mwh``). Marginal
  signal; 5-minute points are averaged to hours.
- EIA v2: ``GET /v2/electricity/rto/fuel-type-data/data/?api_key=&frequency=hourly&data[0]=value
  &facets[respondent][]=``; rows ``{"period", "respondent", "fueltype", "value"}`` under
  ``response.data`` (``response.total`` rows in all, 5000 a page). Generation by fuel, which
  :class:`EiaClient` turns into average intensity.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import aiohttp
import pandas as pd

from services.forecaster.sources import CarbonHistory, EmissionFactor, Signal

__all__ = [
    "EIA_FUEL_FACTORS",
    "LB_PER_MWH_TO_G_PER_KWH",
    "CarbonApiError",
    "EiaClient",
    "ElectricityMapsClient",
    "WattTimeClient",
]

LB_PER_MWH_TO_G_PER_KWH: Final = 0.45359237
"""1 lb/MWh = 453.59237 g / 1000 kWh."""


class CarbonApiError(RuntimeError):
    """A carbon API answered with an error status or an unexpected body."""

    def __init__(self, provider: str, status: int, detail: str) -> None:
        self.provider = provider
        self.status = status
        super().__init__(f"{provider} API error {status}: {detail[:200]}")


def _iso(moment: datetime) -> str:
    stamp = pd.Timestamp(moment)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _hourly(points: list[tuple[str, float]], region: str) -> pd.Series:
    """Average timestamped points into an hourly UTC series."""
    if not points:
        return pd.Series([], index=pd.DatetimeIndex([], tz="UTC"), dtype=float, name=region)
    index = pd.to_datetime([p[0] for p in points], utc=True)
    series = pd.Series([float(p[1]) for p in points], index=index, dtype=float)
    return series.sort_index().resample("h").mean().rename("gco2_per_kwh")


async def _get_json(
    session: aiohttp.ClientSession, provider: str, url: str, **kwargs: Any
) -> dict[str, Any]:
    async with session.get(url, **kwargs) as response:
        if response.status != 200:
            raise CarbonApiError(provider, response.status, await response.text())
        body = await response.json()
    if not isinstance(body, dict):
        raise CarbonApiError(provider, 200, "body is not a JSON object")
    return body


@dataclass(slots=True)
class ElectricityMapsClient:
    """Electricity Maps v3 client (average intensity) for one zone.

    The caller owns ``session`` (one per process, closed on shutdown).
    """

    session: aiohttp.ClientSession
    zone: str
    api_key: str
    base_url: str = "https://api.electricitymap.org"
    emission_factor: EmissionFactor = "lifecycle"
    timeout_s: float = 10.0
    signal: Signal = field(default="average", init=False)

    @property
    def region(self) -> str:
        """Zone this client queries."""
        return self.zone

    async def _points(self, path: str, key: str, params: Mapping[str, str]) -> pd.Series:
        body = await _get_json(
            self.session,
            "electricitymaps",
            f"{self.base_url.rstrip('/')}{path}",
            params={"zone": self.zone, "emissionFactorType": self.emission_factor, **params},
            headers={"auth-token": self.api_key},
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
        )
        rows = body.get(key)
        if not isinstance(rows, list):
            raise CarbonApiError("electricitymaps", 200, f"no '{key}' list in the body")
        points = [
            (str(row["datetime"]), float(row["carbonIntensity"]))
            for row in rows
            if row.get("carbonIntensity") is not None
        ]
        return _hourly(points, self.zone)

    def _history(self, series: pd.Series) -> CarbonHistory:
        return CarbonHistory(
            region=self.zone,
            intensity=series,
            fuel_mix=None,
            signal="average",
            emission_factor=self.emission_factor,
            source=f"{self.base_url} (Electricity Maps)",
        )

    async def latest_history(self) -> CarbonHistory:
        """Return the last 24 h (``/v3/carbon-intensity/history``)."""
        return self._history(await self._points("/v3/carbon-intensity/history", "history", {}))

    async def history(self, start: datetime, end: datetime) -> CarbonHistory:
        """Return ``[start, end]`` (``/v3/carbon-intensity/past-range``; ≤ 10 days a call)."""
        params = {"start": _iso(start), "end": _iso(end)}
        return self._history(await self._points("/v3/carbon-intensity/past-range", "data", params))

    async def provider_forecast(self) -> pd.Series:
        """Return the provider's own hourly forecast (``/v3/carbon-intensity/forecast``)."""
        return await self._points("/v3/carbon-intensity/forecast", "forecast", {})


@dataclass(slots=True)
class WattTimeClient:
    """WattTime v3 client (marginal CO2 rate, MOER) for one region.

    Logs in lazily and again when the token is rejected (HTTP 401). Values are converted
    from lb/MWh to gCO2/kWh.
    """

    session: aiohttp.ClientSession
    grid_region: str
    username: str
    password: str
    base_url: str = "https://api.watttime.org"
    signal_type: str = "co2_moer"
    timeout_s: float = 10.0
    signal: Signal = field(default="marginal", init=False)
    # WattTime's MOER counts combustion emissions of the marginal unit only.
    emission_factor: EmissionFactor = field(default="direct", init=False)
    _token: str | None = field(default=None, init=False, repr=False)

    @property
    def region(self) -> str:
        """Grid region (e.g. ``CAISO_NORTH``) this client queries."""
        return self.grid_region

    async def login(self) -> str:
        """Fetch a bearer token with HTTP basic auth (``/login``)."""
        # Built by hand: aiohttp 3.12+ deprecates BasicAuth, older releases lack its successor.
        pair = f"{self.username}:{self.password}".encode()
        credentials = base64.b64encode(pair).decode("ascii")
        body = await _get_json(
            self.session,
            "watttime",
            f"{self.base_url.rstrip('/')}/login",
            headers={"Authorization": f"Basic {credentials}"},
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
        )
        token = body.get("token")
        if not isinstance(token, str):
            raise CarbonApiError("watttime", 200, "login answered without a token")
        self._token = token
        return token

    async def _get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        query = {"region": self.grid_region, "signal_type": self.signal_type, **params}
        url = f"{self.base_url.rstrip('/')}{path}"
        for attempt in range(2):
            token = self._token if self._token is not None else await self.login()
            try:
                return await _get_json(
                    self.session,
                    "watttime",
                    url,
                    params=query,
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                )
            except CarbonApiError as error:
                if error.status != 401 or attempt:
                    raise
                self._token = None  # expired: log in once more
        raise AssertionError("unreachable")  # pragma: no cover

    def _series(self, body: dict[str, Any]) -> pd.Series:
        units = str(body.get("meta", {}).get("units", "lbs_co2_per_mwh"))
        scale = LB_PER_MWH_TO_G_PER_KWH if units.startswith("lbs") else 1.0
        rows = body.get("data")
        if not isinstance(rows, list):
            raise CarbonApiError("watttime", 200, "no 'data' list in the body")
        points = [(str(r["point_time"]), float(r["value"]) * scale) for r in rows]
        return _hourly(points, self.grid_region)

    async def history(self, start: datetime, end: datetime) -> CarbonHistory:
        """Return hourly MOER for ``[start, end]`` (``/v3/historical``; ≤ 32 days a call)."""
        body = await self._get("/v3/historical", {"start": _iso(start), "end": _iso(end)})
        return CarbonHistory(
            region=self.grid_region,
            intensity=self._series(body),
            fuel_mix=None,
            signal="marginal",
            emission_factor="direct",
            source=f"{self.base_url} (WattTime)",
        )

    async def provider_forecast(self, horizon_h: int = 24) -> pd.Series:
        """Return WattTime's own forecast averaged to hours (``/v3/forecast``)."""
        return self._series(await self._get("/v3/forecast", {"horizon_hours": str(horizon_h)}))

    async def signal_index(self) -> float:
        """Return the current percentile index 0-100 (``/v3/signal-index``)."""
        body = await self._get("/v3/signal-index", {})
        rows = body.get("data")
        if not isinstance(rows, list) or not rows:
            raise CarbonApiError("watttime", 200, "signal-index answered without data")
        return float(rows[0]["value"])


EIA_FUEL_FACTORS: Final = {
    "WND": 11.0,
    "SUN": 41.0,
    "WAT": 24.0,
    "OIL": 650.0,
    "NG": 490.0,
    "COL": 820.0,
    "NUC": 12.0,
    "OTH": 230.0,
}
"""gCO2/kWh per EIA-930 fuel: the life-cycle factors every balancing authority's ``avg_CI``
in the reference files is computed with (exactly, services/forecaster/mix.py), so a live
EIA intensity continues the file's series."""
EIA_PAGE_ROWS: Final = 5000
"""Rows per EIA API v2 answer (its maximum); longer spans are paged with ``offset``."""


@dataclass(slots=True)
class EiaClient:
    """EIA API v2 client: hourly generation by fuel of one balancing authority
    (``/v2/electricity/rto/fuel-type-data/data/``), turned into average intensity with
    :data:`EIA_FUEL_FACTORS`. EIA publishes no intensity forecast; the forecaster's model
    forecasts from this history.

    Rows are ``{"period": "YYYY-MM-DDTHH", "respondent", "fueltype", "value"}`` (UTC hour
    beginning, MW, ``value`` sometimes a string) under ``response.data``; fuels other than
    the eight of the reference files (storage, geothermal, unknown) count as ``OTH``.
    """

    session: aiohttp.ClientSession
    respondent: str
    api_key: str
    base_url: str = "https://api.eia.gov"
    timeout_s: float = 10.0
    signal: Signal = field(default="average", init=False)
    emission_factor: EmissionFactor = field(default="lifecycle", init=False)

    @property
    def region(self) -> str:
        """Balancing authority this client queries."""
        return self.respondent

    async def _rows(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        url = f"{self.base_url.rstrip('/')}/v2/electricity/rto/fuel-type-data/data/"
        while True:
            params = {
                "api_key": self.api_key,
                "frequency": "hourly",
                "data[0]": "value",
                "facets[respondent][]": self.respondent,
                "start": pd.Timestamp(_iso(start)).strftime("%Y-%m-%dT%H"),
                "end": pd.Timestamp(_iso(end)).strftime("%Y-%m-%dT%H"),
                "sort[0][column]": "period",
                "sort[0][direction]": "asc",
                "offset": str(len(rows)),
                "length": str(EIA_PAGE_ROWS),
            }
            body = await _get_json(
                self.session,
                "eia",
                url,
                params=params,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            )
            response = body.get("response")
            page = response.get("data") if isinstance(response, dict) else None
            if not isinstance(page, list):
                raise CarbonApiError("eia", 200, "no 'response.data' list in the body")
            rows.extend(row for row in page if isinstance(row, dict))
            total = int(response.get("total", len(rows))) if isinstance(response, dict) else 0
            if not page or len(rows) >= total:
                return rows

    async def history(self, start: datetime, end: datetime) -> CarbonHistory:
        """Return hourly intensity and generation by fuel for ``[start, end]``."""
        rows = await self._rows(start, end)
        points = []
        for row in rows:
            value = row.get("value")
            if value is None or value == "":
                continue
            fuel = str(row.get("fueltype", "OTH"))
            points.append(
                (
                    pd.Timestamp(str(row["period"])).tz_localize("UTC"),
                    fuel if fuel in EIA_FUEL_FACTORS else "OTH",
                    max(float(value), 0.0),
                )
            )
        if not points:
            empty = pd.DatetimeIndex([], tz="UTC")
            return CarbonHistory(
                region=self.respondent,
                intensity=pd.Series([], index=empty, dtype=float, name="gco2_per_kwh"),
                fuel_mix=None,
                signal="average",
                emission_factor="lifecycle",
                source=f"{self.base_url} (EIA)",
            )
        frame = pd.DataFrame(points, columns=["period", "fuel", "mw"])
        generation = frame.pivot_table(index="period", columns="fuel", values="mw", aggfunc="sum")
        generation = generation.reindex(columns=list(EIA_FUEL_FACTORS), fill_value=0.0).fillna(0.0)
        total = generation.sum(axis=1)
        factors = pd.Series(EIA_FUEL_FACTORS)
        intensity = (generation @ factors) / total.where(total > 0)
        return CarbonHistory(
            region=self.respondent,
            intensity=intensity.astype(float).rename("gco2_per_kwh"),
            fuel_mix=generation.div(total.where(total > 0), axis=0),
            signal="average",
            emission_factor="lifecycle",
            source=f"{self.base_url} (EIA)",
            generation=generation,
        )
