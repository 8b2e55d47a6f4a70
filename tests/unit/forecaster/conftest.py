"""Shared fixtures: a synthetic daily-periodic region and a forecaster fitted on it once."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from services.forecaster.config import ForecasterConfig
from services.forecaster.models import CarbonForecaster, fit_forecaster
from services.forecaster.sources import CarbonHistory


def synthetic_history(days: int = 90, seed: int = 7) -> CarbonHistory:
    """Return a solar-shaped daily cycle with a slow level drift, noise and a solar share."""
    rng = np.random.default_rng(seed)
    index = pd.date_range("2023-01-01", periods=days * 24, freq="h", tz="UTC")
    hours = np.arange(len(index))
    solar = np.clip(np.sin(2 * np.pi * ((hours % 24) - 6) / 24), 0, None)
    level = 300 + 40 * np.sin(2 * np.pi * hours / (24 * 17))
    values = level * (1 - 0.4 * solar) * np.exp(rng.normal(0, 0.03, len(index)))
    mix = pd.DataFrame({"SUN": 0.4 * solar, "NG": 1 - 0.4 * solar}, index=index)
    total_mw = 1000.0 + 150.0 * np.sin(2 * np.pi * hours / (24 * 11))
    return CarbonHistory(
        region="SYN",
        intensity=pd.Series(values, index=index, name="gco2_per_kwh"),
        fuel_mix=mix,
        signal="average",
        emission_factor="direct",
        source="synthetic",
        generation=mix.mul(total_mw, axis=0),
    )


@pytest.fixture(scope="session")
def history() -> CarbonHistory:
    """Synthetic 90-day history."""
    return synthetic_history()


def fit_80_days(history: CarbonHistory, **options: Any) -> CarbonForecaster:
    """A small, fast fit on the first 80 days of the synthetic history."""
    config = ForecasterConfig(
        max_training_rows=10_000, hw_fit_days=14, booster_max_iter=40, **options
    )
    return fit_forecaster(history.until(history.intensity.index[80 * 24 - 1]), config=config)


@pytest.fixture(scope="session")
def fitted(history: CarbonHistory) -> CarbonForecaster:
    """Forecaster fitted on the first 80 days of the synthetic history, with the single
    booster on the ratio to the template (without the booster-base levers R and G)."""
    return fit_80_days(history, booster_base="template", booster_bag=1)


@pytest.fixture(scope="session")
def fitted_mix(history: CarbonHistory) -> CarbonForecaster:
    """The same with the source-production member blended and fed to the booster (its
    log-ratio to the template and the forecast mix's shares)."""
    return fit_80_days(
        history,
        booster_base="template",
        booster_bag=1,
        mix_member=True,
        mix_feature=True,
        mix_share_features=True,
    )


@pytest.fixture(scope="session")
def fitted_rg(history: CarbonHistory) -> CarbonForecaster:
    """The booster-base levers R and G (the default): the booster learns the ratio to
    template + level; two bagged boosters per bucket (three by default) keep the test fast."""
    return fit_80_days(history, booster_base="template_level", booster_bag=2)


@pytest.fixture(scope="session")
def fitted_rgc(history: CarbonHistory) -> CarbonForecaster:
    """The R + G fit with the blend aimed at MAPE (``mape_scale``)."""
    return fit_80_days(history, booster_base="template_level", booster_bag=2, mape_scale=True)
