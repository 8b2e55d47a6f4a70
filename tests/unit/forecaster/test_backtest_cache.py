"""Tests of the backtest's fit cache: keyed by the inputs and the code, stored like the
service's (``model_cache.load_or_fit``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenserve.bench.forecaster import backtest_cache
from greenserve.bench.forecaster.backtest import fit_cached
from services.forecaster.config import ForecasterConfig
from services.forecaster.models import CarbonForecaster
from tests.unit.forecaster.conftest import synthetic_history


def test_a_fit_is_stored_once_and_loaded_for_the_same_inputs_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that the first call fits and stores, the same inputs load without fitting, and a
    different history (one hour more) fits again under another key."""
    history = synthetic_history(days=90)
    # A small fit: the test is of the cache, not of the forecast (fit_80_days' settings).
    config = ForecasterConfig(max_training_rows=10_000, hw_fit_days=14, booster_max_iter=40)
    first, cached = fit_cached(history, config, tmp_path)
    assert isinstance(first, CarbonForecaster)
    assert not cached
    assert len(list(tmp_path.glob(f"{history.region}-*.pkl"))) == 1

    def refuse(*_: object, **__: object) -> CarbonForecaster:
        raise AssertionError("fitted again instead of loading the cached fit")

    with monkeypatch.context() as patch:
        patch.setattr(backtest_cache, "fit_forecaster", refuse)
        again, cached = fit_cached(history, config, tmp_path)
    assert cached
    assert again.region == first.region

    shorter = synthetic_history(days=89)
    _, cached = fit_cached(shorter, config, tmp_path)
    assert not cached
    assert len(list(tmp_path.glob(f"{history.region}-*.pkl"))) == 2
