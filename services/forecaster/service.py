"""Forecaster shell: per region, publish a carbon-intensity forecast every refresh period.

The forecast is made at model time ``now`` from history that ends an hour before it (no
look-ahead); it is published on ``forecast.carbon.<region>`` and stored in Redis for
services that start later. The model is the forecasting core's choice per region and
horizon: a validation-weighted blend (``services.forecaster.models``, measured by
``greenserve bench forecaster``). Its p10/p90 band is the fit's validation band or, where the
config's ``recent_band_days`` is set, the band from the realised errors of the forecasts this
service issued (``services.forecaster.bands``; kept in memory and in the store, so a restart
keeps it: ``services.forecaster.issued_store``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import aiohttp
import msgspec
import numpy as np
import pandas as pd

from proto.codec import encode
from proto.messages import Forecast
from services.forecaster.bands import IssuedForecasts
from services.forecaster.config import config_for
from services.forecaster.issued_store import load_issued, save_issued
from services.forecaster.live import LIVE_FALLBACKS, LiveFeed, aligned_history, feed_for
from services.forecaster.model_cache import cache_key, data_digest, load_or_fit
from services.forecaster.models import (
    CarbonForecast,
    CarbonForecaster,
    SharedFits,
    fit_forecaster,
)
from services.forecaster.sources import CarbonHistory, load_zone
from shared.counters import ERRORS
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic
from shared.zones import Zone, ZoneError, ZoneRegistry

__all__ = [
    "NAME",
    "fit_cut",
    "fit_region",
    "in_daemon_thread",
    "live_message",
    "load_or_fit_regions",
    "refit_cut",
    "replay_origin",
    "same_hour_yesterday",
    "serve",
    "to_message",
    "usable_zones",
]

NAME = "forecaster"
HOUR_S = 3600
T = TypeVar("T")

logger = logging.getLogger(__name__)


def same_hour_yesterday(history: CarbonHistory, origin: pd.Timestamp, horizon_h: int) -> Forecast:
    """Forecast each hour ahead by the value 24 h earlier (repeating the last day).

    Bounds are the 10th/90th percentile of the day-over-day ratio in the last 14 days,
    applied to each value: an honest spread for this naive model.
    """
    past = history.intensity.loc[: origin - pd.Timedelta(hours=1)].dropna()
    if len(past) < 24:
        raise ValueError(f"{history.region}: fewer than 24 hours of history before {origin}")
    last_day = past.iloc[-24:].to_numpy(dtype=float)
    values = np.resize(last_day, horizon_h)
    recent = past.iloc[-24 * 15 :].to_numpy(dtype=float)
    ratios = recent[24:] / np.maximum(recent[:-24], 1e-6) if len(recent) > 24 else np.ones(1)
    lo, hi = np.quantile(ratios, [0.1, 0.9])
    start = past.index[-1] + pd.Timedelta(hours=1)
    return Forecast(
        region=history.region,
        issued_at=time.time(),
        start_s=float(start.timestamp()),
        step_s=HOUR_S,
        values=[float(v) for v in values],
        p10=[float(v * lo) for v in values],
        p90=[float(v * hi) for v in values],
        signal=history.signal,
        emission_factor=history.emission_factor,
        model="same-hour-yesterday",
    )


def to_message(forecast: CarbonForecast) -> Forecast:
    """The wire form of a forecast from the forecasting core."""
    return Forecast(
        region=forecast.region,
        issued_at=time.time(),
        start_s=float(forecast.issued_at.timestamp()),
        step_s=forecast.step_s,
        values=list(forecast.values),
        p10=list(forecast.p10),
        p90=list(forecast.p90),
        signal=forecast.signal,
        emission_factor=forecast.emission_factor,
        model=forecast.model,
    )


def fit_region(
    region: str,
    histories: dict[str, CarbonHistory],
    cut: pd.Timestamp,
    shared: SharedFits | None = None,
    source: str = "eia",
) -> CarbonForecaster:
    """Fit the chosen model on everything before ``cut``, pooling the other regions' rows.

    Pooling follows the backtest (docs/forecaster.md): EIA regions have only months of
    history each, and the boosted model learns more from all of them together. ``shared``
    lets the regions of one start-up fit the pool's boosters once (same result, less time).
    """
    own = histories[region].until(cut)
    related = [h.until(cut) for name, h in histories.items() if name != region]
    config = config_for(source)
    try:
        return fit_forecaster(own, config=config, related=related, shared=shared)
    except ValueError:
        # Fuel-mix columns differ across sources: fit alone.
        return fit_forecaster(own, config=config)


def fit_cut(now_s: float) -> pd.Timestamp:
    """Last hour of history a start-up fit at model time ``now_s`` may use (no look-ahead)."""
    return pd.Timestamp(now_s, unit="s", tz="UTC").floor("h") - pd.Timedelta(hours=1)


def refit_cut(
    fitted_cut: pd.Timestamp | None, now_s: float, refit_days: float
) -> pd.Timestamp | None:
    """The data end of the next re-estimation, if one is due at model time ``now_s``.

    Due when ``refit_days`` (> 0) have passed since the data end of the models in use (as
    the bench's rolling protocol refits, ``greenserve.bench.forecaster.backtest.refit_origins``);
    ``None`` otherwise, and always with no fit yet (the start-up fit runs on its own).
    """
    if fitted_cut is None or refit_days <= 0:
        return None
    cut = fit_cut(now_s)
    return cut if cut - fitted_cut >= pd.Timedelta(days=refit_days) else None


def load_or_fit_regions(
    histories: dict[str, CarbonHistory],
    source: str | Mapping[str, str],
    cut: pd.Timestamp,
    cache_dir: Path | None,
) -> Iterator[tuple[str, CarbonForecaster | ValueError]]:
    """Each region's forecaster fitted up to ``cut`` (from ``cache_dir`` if stored there),
    one region at a time, or the ``ValueError`` that says why it cannot be fitted.

    ``source`` is every region's source, or one per region: a region is pooled with the
    regions of its own source only (their fuel columns agree), and the regions of one
    source share one :class:`SharedFits`, so the pool's boosters are fitted once."""
    sources = dict.fromkeys(histories, source) if isinstance(source, str) else dict(source)
    pools = {
        src: {name: h for name, h in histories.items() if sources[name] == src}
        for src in dict.fromkeys(sources.values())
    }
    digests = {src: data_digest(pool.values(), cut) for src, pool in pools.items()}
    shared = {src: SharedFits() for src in pools}
    for region in histories:
        src = sources[region]
        pool = pools[src]
        key = cache_key(region, src, list(pool), cut, digests[src])
        fit = functools.partial(fit_region, region, pool, cut, shared[src], src)
        try:
            yield region, load_or_fit(cache_dir, key, fit, CarbonForecaster)
        except ValueError as exc:
            yield region, exc


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a daemon thread, awaited.

    Unlike ``asyncio.to_thread`` a cancelled wait does not hold the process: the default
    executor's threads are joined when the event loop closes, so a stop during a fit (a
    minute of CPU) used to wait for the fit to end; a daemon thread ends with the process
    (a fit in progress is lost, a finished one is already in the model cache)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]  # None only with an error

    def run() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (fn(), None)
        except BaseException as exc:  # handed to the awaiting task, which decides
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name="forecaster-fit", daemon=True).start()
    return await future


def usable_zones(registry: ZoneRegistry, names: Sequence[str], source: str | None) -> list[Zone]:
    """The zones of ``names`` that resolve; each one that does not is logged with what it
    lacks and counted (``greenserve_errors_total{code="zone_unusable"}``), and the service
    forecasts the others."""
    zones: dict[str, Zone] = {}
    for name in names:
        full = name if ":" in name or source is None else f"{source}:{name}"
        try:
            zone = registry.resolve(full)
        except ZoneError as exc:
            ERRORS.labels(NAME, "zone_unusable").inc()
            logger.error("not forecasting %s: %s", name, exc)  # noqa: TRY400 (the reason is all)
            continue
        other = zones.setdefault(zone.code, zone)
        if other.name != zone.name:
            ERRORS.labels(NAME, "zone_unusable").inc()
            logger.error(
                "not forecasting %s: %s already names region %s", name, other.name, zone.code
            )
    return list(zones.values())


def replay_origin(now_s: float, history: CarbonHistory) -> pd.Timestamp:
    """The model-time hour a replay forecasts from: the clock's, kept inside the data (a
    day after its first hour, so there is a day to forecast from, up to just after its last):
    a zone whose file covers other years than the clock still answers, dated with the
    data's hour (the answer says which)."""
    origin = pd.Timestamp(now_s, unit="s", tz="UTC").floor("h")
    observed = history.intensity.dropna().index
    first = pd.Timestamp(observed[0]) + pd.Timedelta(days=1)
    end = pd.Timestamp(observed[-1]) + pd.Timedelta(hours=1)
    return max(first, min(origin, end))


def live_message(
    feed: LiveFeed,
    base: CarbonHistory,
    model: CarbonForecaster | None,
    origin: pd.Timestamp,
    horizon_h: int,
    now_s: float,
) -> Forecast:
    """The live forecast of one zone at the wall-clock hour ``origin`` (:mod:`.live`): the
    provider's forecast, the model's beyond it or without one, the model's alone (labelled
    ``fallback``, counted) when the provider is out."""
    data = feed.fresh(now_s)
    history = aligned_history(base, data.history if data is not None else None, origin)
    hours = pd.date_range(origin, periods=horizon_h, freq="h")
    own: CarbonForecast | None = None
    if model is not None:
        try:
            own = model.forecast(history, origin, horizon_h)
        except ValueError as exc:
            logger.warning("%s: no live model forecast: %s", feed.region, exc)
    if own is not None:
        values = np.asarray(own.values, dtype=float)
        p10, p90, label = np.asarray(own.p10), np.asarray(own.p90), own.model
    else:
        fallback_fc = same_hour_yesterday(history, origin, horizon_h)
        values = np.asarray(fallback_fc.values, dtype=float)
        p10, p90 = np.asarray(fallback_fc.p10), np.asarray(fallback_fc.p90)
        label = fallback_fc.model
    signal, emission_factor = base.signal, base.emission_factor
    if data is not None and data.forecast is not None and len(data.forecast):
        theirs = data.forecast.combine_first(data.history.intensity).reindex(hours)
        have = theirs.notna().to_numpy()
        if have.any():
            scale = np.where(values > 0, theirs.to_numpy(dtype=float) / np.maximum(values, 1e-9), 1)
            p10 = np.where(have, p10 * scale, p10)
            p90 = np.where(have, p90 * scale, p90)
            values = np.where(have, theirs.to_numpy(dtype=float), values)
            label = f"{feed.provider} forecast"
            if not have.all():
                label += f" + {label_of(own)} where it has none"
            signal, emission_factor = data.history.signal, data.history.emission_factor
    elif data is not None:
        label = f"{label} on {feed.provider} data"
    fallback = ""
    if data is None:
        fallback = feed.outage()
        LIVE_FALLBACKS.labels(feed.region, feed.provider).inc()
    return Forecast(
        region=feed.region,
        issued_at=now_s,
        start_s=float(origin.timestamp()),
        step_s=HOUR_S,
        values=[float(v) for v in values],
        p10=[float(v) for v in np.minimum(p10, values)],
        p90=[float(v) for v in np.maximum(p90, values)],
        signal=signal,
        emission_factor=emission_factor,
        model=label,
        mode="live",
        fallback=fallback,
    )


def label_of(forecast: CarbonForecast | None) -> str:
    """The model part of a live forecast's label."""
    return "same-hour-yesterday" if forecast is None else "the model"


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set.

    ``replay`` (the default): forecasts from the data files at the stack's model time, each
    stamped with the data's time and marked ``replay``. Models are fitted in a daemon thread
    at start-up on the history before the model-time origin (no look-ahead), or loaded from
    the model cache; until a region's model is ready, its forecast is same-hour-yesterday,
    labelled so. Every ``forecaster.refit_days`` of model time they are fitted again on all
    history before the new origin, in the background; each region keeps its old model until
    its new one is ready.

    ``live``: forecasts at the wall-clock hour from each zone's provider (:mod:`.live`), the
    model fitted on the whole data file standing in where the provider forecasts nothing or
    is out.
    """
    cfg = ctx.settings.forecaster
    live = cfg.mode == "live"
    registry = ZoneRegistry.from_settings(cfg.zones)
    zones = usable_zones(registry, cfg.regions, cfg.source)
    loaded = await asyncio.to_thread(lambda: {zone.code: load_zone(zone) for zone in zones})
    histories: dict[str, CarbonHistory] = loaded
    sources = {zone.code: zone.source for zone in zones}
    data_end = (
        max(h.intensity.dropna().index[-1] for h in histories.values()) if histories else None
    )
    models: dict[str, CarbonForecaster] = {}
    fitted_cut: pd.Timestamp | None = None
    # The band from recent errors needs the forecasts this service issued: kept in memory
    # and in the store, so a restart keeps the band's four weeks of history. Live forecasts
    # keep the fit's band (the realised values are the provider's, not the file's).
    core = config_for("eia")
    band_days = 0 if live else core.recent_band_days
    issued = {
        region: IssuedForecasts(days=band_days, pool_h=core.quantile_pool_h) for region in histories
    }
    if band_days:
        for region, log in issued.items():
            taken = await load_issued(ctx.redis, ctx.keys.forecast_log(region), log)
            if taken:
                logger.info("%s: %d issued forecasts taken back from the store", region, taken)

    async def fit_all(cut: pd.Timestamp) -> None:
        fits = load_or_fit_regions(histories, sources, cut, cfg.model_cache_dir)
        try:
            # One region per thread hop, in a daemon thread: a stop neither waits for the
            # fit in progress nor for the regions after it.
            while (item := await in_daemon_thread(lambda: next(fits, None))) is not None:
                region, fitted = item
                if isinstance(fitted, ValueError):
                    logger.warning(
                        "no fitted forecaster for %s (%s); keeping %s",
                        region,
                        fitted,
                        "its last model" if region in models else "same-hour-yesterday",
                    )
                else:
                    models[region] = fitted
                    logger.info("forecaster for %s fitted on data to %s", region, cut)
        except Exception:
            # A failed fit (an unreadable model cache, say) must not end the service: the
            # regions keep the models they have and the next refit tries again.
            logger.exception(
                "forecaster fits on data to %s failed; keeping the current models", cut
            )

    def start_fit(cut: pd.Timestamp) -> asyncio.Task[None]:
        nonlocal fitted_cut
        fitted_cut = cut
        return asyncio.create_task(fit_all(cut))

    def first_cut() -> pd.Timestamp:
        now_s = time.time() if live else ctx.clock.now()
        cut = fit_cut(now_s)
        # Past the data's end the cut is the data's end: the same fit (and cache entry)
        # at every start, not one per hour of the clock.
        return cut if data_end is None else min(cut, data_end)

    fitting = start_fit(first_cut())
    failing: set[str] = set()  # regions whose model raised, logged once per streak
    past_data: set[str] = set()  # replay regions whose clock is outside the data, logged once

    session: aiohttp.ClientSession | None = None
    feeds: dict[str, LiveFeed] = {}
    polls: list[asyncio.Task[None]] = []
    if live:
        session = aiohttp.ClientSession()
        feeds = {
            zone.code: feed_for(zone, session, cfg.horizon_h, cfg.live_urls, cfg.live_poll_s)
            for zone in zones
        }
        for feed in feeds.values():
            if feed.fetch is None:
                logger.warning("%s: live provider %s: %s", feed.region, feed.provider, feed.error)
            else:
                await feed.poll_once()  # the first answers before the first forecast
                polls.append(asyncio.create_task(feed.run(ctx.stop)))

    async def modelled(
        region: str, model: CarbonForecaster, history: CarbonHistory, origin: pd.Timestamp
    ) -> Forecast | None:
        """The model's forecast (banded), or None when the model failed otherwise than by a
        ``ValueError`` (no forecast possible, which the caller reports): a model that cannot
        forecast (a cached fit older code pickled, say) must not end the refresh, or the
        regions after it would never be published as the loop retried the same failure."""
        try:
            # CPU work (about 35 ms per region with the fitted blend): off the event loop,
            # which must keep answering NATS (and hosts every service in the in-process
            # stack). The model and history are only read; a refit builds new ones.
            forecast = await asyncio.to_thread(model.forecast, history, origin, cfg.horizon_h)
            if band_days:
                log = issued[region]
                before = set(log.entries())
                forecast = log.banded(forecast, history)
                await save_issued(ctx.redis, ctx.keys.forecast_log(region), log, before)
            message = to_message(forecast)
        except ValueError:
            raise
        except Exception:
            if region not in failing:
                failing.add(region)
                logger.exception(
                    "the %s model failed; same-hour-yesterday until it forecasts", region
                )
            return None
        failing.discard(region)
        return message

    async def replayed(region: str, history: CarbonHistory) -> Forecast:
        """The replay forecast: at model time, stamped with the data's hour (raises
        ``ValueError`` when no forecast is possible)."""
        now_s = ctx.clock.now()
        origin = replay_origin(now_s, history)
        if abs(origin.timestamp() - now_s) > HOUR_S and region not in past_data:
            past_data.add(region)
            logger.warning(
                "%s: the model clock is outside the data; replaying from %s (set "
                "clock.origin_model_s inside the data, or run in live mode)",
                region,
                origin,
            )
        model = models.get(region)
        message = None if model is None else await modelled(region, model, history, origin)
        if message is None:
            message = same_hour_yesterday(history, origin, cfg.horizon_h)
        return msgspec.structs.replace(message, issued_at=float(origin.timestamp()), mode="replay")

    async def refresh() -> None:
        nonlocal fitting
        due = None if live else refit_cut(fitted_cut, ctx.clock.now(), cfg.refit_days)
        if due is not None and data_end is not None and fitted_cut is not None:
            due = due if min(due, data_end) > fitted_cut else None  # no new data: no refit
        if due is not None and fitting.done():
            logger.info("re-estimating the forecasters on data to %s", due)
            fitting = start_fit(min(due, data_end) if data_end is not None else due)
        now_wall = time.time()
        for region, history in histories.items():
            try:
                if live:
                    origin = pd.Timestamp(now_wall, unit="s", tz="UTC").floor("h")
                    message = await asyncio.to_thread(
                        live_message,
                        feeds[region],
                        history,
                        models.get(region),
                        origin,
                        cfg.horizon_h,
                        now_wall,
                    )
                else:
                    message = await replayed(region, history)
            except ValueError as exc:
                logger.warning("no forecast for %s: %s", region, exc)
                continue
            payload = encode(message)
            await ctx.nc.publish(ctx.subjects.forecast(region), payload)
            await ctx.redis.set(ctx.keys.forecast(region), payload)

    try:
        await run_periodic(
            ctx.stop, ctx.clock.wall_period(cfg.refresh_s), refresh, service=NAME, name="forecast"
        )
    finally:
        fitting.cancel()
        for task in polls:
            task.cancel()
        for task in [fitting, *polls]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if session is not None:
            await session.close()
