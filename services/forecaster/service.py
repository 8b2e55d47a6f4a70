"""Forecaster shell: per region, publish a carbon-intensity forecast every refresh period.

The forecast is made at model time ``now`` from history that ends an hour before it (no
look-ahead); it is published on ``forecast.carbon.<region>`` and stored in Redis for
services that start later. The model is chosen by the forecasting core when it offers one;
until then same-hour-yesterday (the seed's simplest baseline) is used and labelled so.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd

from proto.codec import encode
from proto.messages import Forecast
from services.forecaster.sources import CarbonHistory, CsvCarbonSource
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic

__all__ = ["NAME", "same_hour_yesterday", "serve"]

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


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    cfg = ctx.settings.forecaster
    histories = {
        region: CsvCarbonSource(region=region, kind="em" if cfg.source == "em" else "eia").load()
        for region in cfg.regions
    }

    async def refresh() -> None:
        origin = pd.Timestamp(ctx.clock.now(), unit="s", tz="UTC").floor("h")
        for region, history in histories.items():
            try:
                forecast = same_hour_yesterday(history, origin, cfg.horizon_h)
            except ValueError as exc:
                logger.warning("no forecast for %s: %s", region, exc)
                continue
            payload = encode(forecast)
            await ctx.nc.publish(ctx.subjects.forecast(region), payload)
            await ctx.redis.set(ctx.keys.forecast(region), payload)

    await run_periodic(
        ctx.stop, ctx.clock.wall_period(cfg.refresh_s), refresh, service=NAME, name="forecast"
    )
