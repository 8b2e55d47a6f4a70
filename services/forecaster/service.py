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
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from proto.codec import encode
from proto.messages import Forecast
from services.forecaster.bands import IssuedForecasts
from services.forecaster.config import config_for
from services.forecaster.issued_store import load_issued, save_issued
from services.forecaster.model_cache import cache_key, load_or_fit
from services.forecaster.models import (
    CarbonForecast,
    CarbonForecaster,
    SharedFits,
    fit_forecaster,
)
from services.forecaster.sources import CarbonHistory, CsvCarbonSource
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic

__all__ = [
    "NAME",
    "fit_cut",
    "fit_region",
    "load_or_fit_regions",
    "refit_cut",
    "same_hour_yesterday",
    "serve",
    "to_message",
]

NAME = "forecaster"
HOUR_S = 3600

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
    the bench's rolling protocol refits, ``services.forecaster.backtest.refit_origins``);
    ``None`` otherwise, and always with no fit yet (the start-up fit runs on its own).
    """
    if fitted_cut is None or refit_days <= 0:
        return None
    cut = fit_cut(now_s)
    return cut if cut - fitted_cut >= pd.Timedelta(days=refit_days) else None


def load_or_fit_regions(
    histories: dict[str, CarbonHistory],
    source: str,
    cut: pd.Timestamp,
    cache_dir: Path | None,
) -> Iterator[tuple[str, CarbonForecaster | ValueError]]:
    """Each region's forecaster fitted up to ``cut`` (from ``cache_dir`` if stored there),
    one region at a time, or the ``ValueError`` that says why it cannot be fitted. The
    regions share one :class:`SharedFits`, so the pool's boosters are fitted once."""
    shared = SharedFits()
    for region in histories:
        key = cache_key(region, source, list(histories), cut)
        fit = functools.partial(fit_region, region, histories, cut, shared, source)
        try:
            yield region, load_or_fit(cache_dir, key, fit, CarbonForecaster)
        except ValueError as exc:
            yield region, exc


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set.

    Models are fitted in a worker thread at start-up on the history before the model-time
    origin (no look-ahead); until a region's model is ready, its forecast is
    same-hour-yesterday, labelled so. Every ``forecaster.refit_days`` of model time they are
    fitted again on all history before the new origin, in the background; each region keeps
    its old model until its new one is ready.
    """
    cfg = ctx.settings.forecaster
    histories = {
        region: CsvCarbonSource(region=region, kind="em" if cfg.source == "em" else "eia").load()
        for region in cfg.regions
    }
    models: dict[str, CarbonForecaster] = {}
    fitted_cut: pd.Timestamp | None = None
    # The band from recent errors needs the forecasts this service issued: kept in memory
    # and in the store, so a restart keeps the band's four weeks of history.
    core = config_for(cfg.source)
    band_days = core.recent_band_days
    issued = {
        region: IssuedForecasts(days=band_days, pool_h=core.quantile_pool_h) for region in histories
    }
    if band_days:
        for region, log in issued.items():
            taken = await load_issued(ctx.redis, ctx.keys.forecast_log(region), log)
            if taken:
                logger.info("%s: %d issued forecasts taken back from the store", region, taken)

    async def fit_all(cut: pd.Timestamp) -> None:
        fits = load_or_fit_regions(histories, cfg.source, cut, cfg.model_cache_dir)
        try:
            # One region per thread hop, so a stop cancels between regions.
            while (item := await asyncio.to_thread(next, fits, None)) is not None:
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

    fitting = start_fit(fit_cut(ctx.clock.now()))
    failing: set[str] = set()  # regions whose model raised, logged once per streak

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

    async def refresh() -> None:
        nonlocal fitting
        due = refit_cut(fitted_cut, ctx.clock.now(), cfg.refit_days)
        if due is not None and fitting.done():
            logger.info("re-estimating the forecasters on data to %s", due)
            fitting = start_fit(due)
        origin = pd.Timestamp(ctx.clock.now(), unit="s", tz="UTC").floor("h")
        for region, history in histories.items():
            model = models.get(region)
            try:
                message = None if model is None else await modelled(region, model, history, origin)
                if message is None:
                    message = same_hour_yesterday(history, origin, cfg.horizon_h)
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
        with contextlib.suppress(asyncio.CancelledError):
            await fitting
