"""The epoch planner's carbon intensity: the forecaster fitted on each region's history
before the scenario's start, issued at the epoch's start hour (inputs end 1 h before it: no
look-ahead), or the forecast the run is given.

:class:`PlanIntensity` is a base of :class:`loadgen.simulator.planned.EpochPlanner`, which
builds the state declared here in its ``__init__``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from loadgen.simulator.cluster_view import PlannerView
    from services.forecaster.models import CarbonForecaster
    from services.forecaster.sources import CarbonHistory
    from services.planner.live_inputs import LivePool

__all__ = ["FORECAST_HORIZON_H", "PlanIntensity", "fitted_forecaster"]

FORECAST_HORIZON_H = 6
"""Hours the simulator's carbon forecaster is fitted for (an epoch needs at most two)."""


def _history(code: str) -> CarbonHistory:
    from loadgen.simulator.carbon import zone_history

    return zone_history(code)


@functools.lru_cache(maxsize=16)
def fitted_forecaster(code: str, start_utc: pd.Timestamp) -> CarbonForecaster:
    """The carbon forecaster of one grid zone, fitted on history ending before ``start_utc``."""
    from loadgen.simulator.carbon import zone_source
    from services.forecaster.config import ForecasterConfig, config_for
    from services.forecaster.models import fit_forecaster

    history = _history(code).until(start_utc.floor("h") - pd.Timedelta(hours=1))
    # An Electricity Maps zone gets the settings the service fits it with (config_for).
    config = config_for(zone_source(code), ForecasterConfig(horizon_h=FORECAST_HORIZON_H))
    return fit_forecaster(history, config=config)


class PlanIntensity:
    """The epoch planner's intensity forecast (a base of ``EpochPlanner``)."""

    view: PlannerView
    pools: dict[str, LivePool]
    steps: int
    step_s: float
    start_utc: pd.Timestamp
    forecasters: dict[str, CarbonForecaster]
    codes: dict[str, str]
    _forecast_intensity: bool

    def intensity(self, t_s: float) -> dict[str, tuple[float, ...]]:
        """Forecast intensity per region at each step of the epoch starting at ``t_s``."""
        regions = sorted({p.region for p in self.pools.values()})
        if not self._forecast_intensity:
            return dict.fromkeys(regions, (1.0,) * self.steps)
        given = self.view.carbon_forecast
        if given is not None:
            return {
                r: tuple(given(r, t_s + k * self.step_s) for k in range(self.steps))
                for r in regions
            }
        origin = (self.start_utc + pd.Timedelta(seconds=t_s)).floor("h")
        out: dict[str, tuple[float, ...]] = {}
        for region in regions:
            forecast = self.forecasters[region].forecast(
                _history(self.codes[region]), origin, horizon_h=FORECAST_HORIZON_H
            )
            values = []
            for k in range(self.steps):
                at = self.start_utc + pd.Timedelta(seconds=t_s + k * self.step_s)
                index = int((at - origin).total_seconds() // forecast.step_s)
                values.append(forecast.values[min(index, len(forecast.values) - 1)])
            out[region] = tuple(values)
        return out
