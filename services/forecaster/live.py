"""Live mode: current and forecast intensity from the zone's provider, on the wall clock.

Each zone has one :class:`LiveFeed`: a poll of its provider (Electricity Maps, WattTime or
the EIA API, through :mod:`services.forecaster.api_clients`; keys from the environment) at
the provider's cadence, whose last good answer is cached. A forecast at the wall-clock
hour is then:

- the provider's own forecast where it has one (Electricity Maps, WattTime), the fitted
  model's forecast filling the hours past its end;
- the model's forecast on the provider's recent history where the provider forecasts
  nothing (EIA);
- on a provider outage (an error, a missing key, or an answer older than two poll periods)
  the model's forecast on the history it holds, labelled as a fallback in the forecast and
  counted (``greenserve_forecaster_live_fallbacks_total``).

The model needs a week of recent hours. The data file's history is moved forward by whole
weeks so that it ends where the provider's hours begin (or at the wall-clock hour when there
are none): the hour-of-week profile of the file carries the forecast until the provider's own
hours have replaced it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import aiohttp
import pandas as pd
from prometheus_client import Counter

from services.forecaster.api_clients import (
    CarbonApiError,
    EiaClient,
    ElectricityMapsClient,
    WattTimeClient,
)
from services.forecaster.sources import CarbonHistory
from shared.zones import LIVE_KEY_ENV, LiveProvider, Zone

__all__ = [
    "CADENCE_S",
    "KEY_ENV",
    "LIVE_ERRORS",
    "LIVE_FALLBACKS",
    "LiveData",
    "LiveFeed",
    "aligned_history",
    "feed_for",
]

logger = logging.getLogger(__name__)

CADENCE_S: Final = {"electricitymaps": 3600.0, "watttime": 300.0, "eia": 3600.0}
"""Poll period per provider (wall s): Electricity Maps and EIA-930 publish hourly values,
WattTime a MOER every five minutes."""
KEY_ENV: Final = LIVE_KEY_ENV
"""Environment variables holding each provider's credentials."""
_PUBLIC_URLS: Final = {
    "electricitymaps": "https://api.electricitymap.org",
    "watttime": "https://api.watttime.org",
    "eia": "https://api.eia.gov",
}
RECENT_DAYS: Final = 9
"""Days of recent history asked for (the model reads the last 8: template and lags)."""
RETRY_S: Final = 60.0
"""Wait before the next poll after a failed one, when the cadence is longer."""
HOUR: Final = pd.Timedelta(hours=1)
WEEK: Final = pd.Timedelta(days=7)

LIVE_FALLBACKS: Final = Counter(
    "greenserve_forecaster_live_fallbacks_total",
    "Live forecasts issued from the model because the zone's provider was unavailable",
    ["region", "provider"],
)
LIVE_ERRORS: Final = Counter(
    "greenserve_forecaster_live_errors_total",
    "Failed polls of a live carbon provider, by region and provider",
    ["region", "provider"],
)


@dataclass(frozen=True, slots=True)
class LiveData:
    """One good answer of a provider."""

    history: CarbonHistory
    """Recent hourly intensity (and fuels, from EIA)."""
    forecast: pd.Series | None
    """The provider's hourly forecast (UTC index), or ``None`` (EIA has none)."""


Fetch = Callable[[], Awaitable[LiveData]]


@dataclass(slots=True)
class LiveFeed:
    """The polled provider of one zone and its last good answer."""

    region: str
    provider: str
    fetch: Fetch | None
    """``None`` when the provider cannot be asked (no credentials): always a fallback."""
    poll_s: float
    data: LiveData | None = None
    fetched_at_s: float | None = None
    """Wall time of the last good answer."""
    error: str | None = None
    """Why the last poll failed (or why there is no poll); ``None`` after a good one."""
    polls: int = field(default=0)

    async def poll_once(self) -> None:
        """Ask the provider once; keep the answer, or the reason it failed (counted)."""
        self.polls += 1
        if self.fetch is None:
            return
        try:
            data = await self.fetch()
        except (CarbonApiError, aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"[:300]
            LIVE_ERRORS.labels(self.region, self.provider).inc()
            logger.warning("%s: %s poll failed: %s", self.region, self.provider, self.error)
            return
        self.data, self.fetched_at_s, self.error = data, time.time(), None

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set, after the first poll (:meth:`poll_once`, made before
        the first forecast): at the cadence, sooner again after a failure."""
        while not stop.is_set():
            wait = self.poll_s if self.error is None else min(self.poll_s, RETRY_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if not stop.is_set():
                await self.poll_once()

    def fresh(self, now_s: float) -> LiveData | None:
        """The last answer if it is recent (two poll periods and a retry); else None."""
        if self.data is None or self.fetched_at_s is None:
            return None
        return self.data if now_s - self.fetched_at_s <= 2 * self.poll_s + RETRY_S else None

    def outage(self) -> str:
        """Why there is no fresh answer, for the forecast's ``fallback`` field."""
        reason = self.error or "no answer yet"
        return f"{self.provider} unavailable ({reason}); the model's own forecast"


def feed_for(
    zone: Zone,
    session: aiohttp.ClientSession,
    horizon_h: int,
    urls: Mapping[LiveProvider, str] | None = None,
    poll_s: Mapping[LiveProvider, float] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LiveFeed:
    """The feed of ``zone`` from its live provider, credentials read from ``environ``."""
    env = os.environ if environ is None else environ
    provider = zone.live_provider
    period = (poll_s or {}).get(provider, CADENCE_S[provider])
    missing = [name for name in KEY_ENV[provider] if not env.get(name)]
    if missing:
        feed = LiveFeed(zone.code, provider, None, period)
        feed.error = f"no credentials: set {' and '.join(missing)}"
        return feed
    base_url = (urls or {}).get(provider) or _PUBLIC_URLS[provider]

    def window() -> tuple[pd.Timestamp, pd.Timestamp]:
        end = pd.Timestamp.now(tz="UTC").floor("h")
        return end - pd.Timedelta(days=RECENT_DAYS), end

    if provider == "electricitymaps":
        em = ElectricityMapsClient(
            session, zone.live_code, env["ELECTRICITYMAPS_API_KEY"], base_url=base_url
        )

        async def fetch_em() -> LiveData:
            start, end = window()
            # past-range answers at most 10 days a call; the forecast is a second call.
            history = await em.history(start.to_pydatetime(), end.to_pydatetime())
            return LiveData(history=history, forecast=await em.provider_forecast())

        return LiveFeed(zone.code, provider, fetch_em, period)
    if provider == "watttime":
        wt = WattTimeClient(
            session,
            zone.live_code,
            env["WATTTIME_USERNAME"],
            env["WATTTIME_PASSWORD"],
            base_url=base_url,
        )

        async def fetch_wt() -> LiveData:
            start, end = window()
            history = await wt.history(start.to_pydatetime(), end.to_pydatetime())
            return LiveData(history=history, forecast=await wt.provider_forecast(horizon_h))

        return LiveFeed(zone.code, provider, fetch_wt, period)
    eia = EiaClient(session, zone.live_code, env["EIA_API_KEY"], base_url=base_url)

    async def fetch_eia() -> LiveData:
        start, end = window()
        return LiveData(
            history=await eia.history(start.to_pydatetime(), end.to_pydatetime()), forecast=None
        )

    return LiveFeed(zone.code, provider, fetch_eia, period)


def _shifted(frame: pd.DataFrame | None, offset: pd.Timedelta) -> pd.DataFrame | None:
    return None if frame is None else frame.set_axis(frame.index + offset)


def aligned_history(
    base: CarbonHistory, recent: CarbonHistory | None, origin: pd.Timestamp
) -> CarbonHistory:
    """``base`` moved forward by whole weeks to end just before ``recent`` begins (or before
    ``origin`` without recent hours), then ``recent``'s hours: a history the model can
    forecast ``origin`` from. Moving by weeks keeps every hour on its hour of the week."""
    if recent is not None and recent.signal != base.signal:
        recent = None  # a marginal (WattTime) series does not continue an average one
    observed = recent.intensity.dropna() if recent is not None else pd.Series(dtype=float)
    first = observed.index[0] if len(observed) else origin
    base_end = base.intensity.dropna().index[-1]
    weeks = max(0, math.ceil((first - HOUR - base_end) / WEEK))
    offset = weeks * WEEK
    moved = base.intensity.set_axis(base.intensity.index + offset).loc[: first - HOUR]
    if recent is None or not len(observed):
        fuel_mix, generation = _shifted(base.fuel_mix, offset), _shifted(base.generation, offset)
        return dataclasses.replace(
            base,
            intensity=moved,
            fuel_mix=None if fuel_mix is None else fuel_mix.loc[: first - HOUR],
            generation=None if generation is None else generation.loc[: first - HOUR],
            context=None,
        )
    tail = recent.intensity.loc[first:]
    intensity = pd.concat([moved, tail]).rename("gco2_per_kwh")

    def joined(old: pd.DataFrame | None, new: pd.DataFrame | None) -> pd.DataFrame | None:
        if old is None:
            return None
        moved_old = old.set_axis(old.index + offset).loc[: first - HOUR]
        later = (
            new.reindex(columns=old.columns).loc[first:]
            if new is not None
            else pd.DataFrame(index=tail.index, columns=old.columns, dtype=float)
        )
        return pd.concat([moved_old, later])

    return dataclasses.replace(
        base,
        intensity=intensity,
        fuel_mix=joined(base.fuel_mix, recent.fuel_mix),
        generation=joined(base.generation, recent.generation),
        context=None,
        source=f"{base.source} + {recent.source}",
    )
