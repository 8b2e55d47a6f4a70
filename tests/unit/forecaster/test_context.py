"""Cross-region context for the booster (``context_features``; docs/forecaster.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from services.forecaster.features import to_grid
from services.forecaster.models import CarbonForecaster
from services.forecaster.sources import CarbonHistory, with_context, with_unknown_context
from tests.unit.forecaster.conftest import fit_80_days, synthetic_history


@pytest.fixture(scope="module")
def neighbour() -> CarbonHistory:
    """A second synthetic region (another seed), the context's other column."""
    return dataclasses.replace(synthetic_history(seed=11), region="NBR")


@pytest.fixture(scope="module")
def with_ctx(history: CarbonHistory, neighbour: CarbonHistory) -> CarbonHistory:
    """The synthetic region with both regions as its context."""
    return with_context(history, {"SYN": history, "NBR": neighbour})


@pytest.fixture(scope="module")
def fitted_ctx(with_ctx: CarbonHistory) -> CarbonForecaster:
    """A small fit with the context features on."""
    return fit_80_days(with_ctx, booster_bag=1, context_features=True)


def test_the_context_is_every_region_by_name_and_is_cut_with_the_history(
    history: CarbonHistory, neighbour: CarbonHistory, with_ctx: CarbonHistory
) -> None:
    """Test column order (sorted), alignment, and that until() cuts the context too."""
    assert with_ctx.context is not None
    assert list(with_ctx.context.columns) == ["NBR", "SYN"]
    pd.testing.assert_series_equal(with_ctx.context["NBR"], neighbour.intensity, check_names=False)
    end = history.intensity.index[50 * 24]
    cut = with_ctx.until(end)
    assert cut.context is not None
    assert cut.context.index[-1] == end
    grid = to_grid(cut)
    assert grid.context_names == ("NBR", "SYN")
    assert grid.context.shape == (len(grid), 2)
    unknown = to_grid(with_unknown_context(neighbour, ["NBR", "SYN"]))
    assert np.isnan(unknown.context).all()


def test_a_context_forecast_is_causal_in_the_neighbours_values(
    with_ctx: CarbonHistory, fitted_ctx: CarbonForecaster
) -> None:
    """Test that the neighbour's values from the origin on move nothing, and the hour
    before does (so the booster reads the context at all)."""
    assert fitted_ctx.context_names == ("NBR", "SYN")
    grid = to_grid(with_ctx)
    origins = np.array([84 * 24 + 7], dtype=np.int64)
    before = fitted_ctx.predict(grid, origins)
    context = grid.context.copy()
    context[origins[0] :, 0] *= 5.0
    after = fitted_ctx.predict(dataclasses.replace(grid, context=context), origins)
    for name, values in before.items():
        np.testing.assert_array_equal(after[name], values, err_msg=name)
    context[origins[0] - 3 : origins[0], 0] *= 3.0
    moved = fitted_ctx.predict(dataclasses.replace(grid, context=context), origins)
    assert not np.array_equal(moved["gbm"], before["gbm"])


def test_a_context_forecaster_refuses_a_history_without_its_context(
    history: CarbonHistory, fitted_ctx: CarbonForecaster
) -> None:
    """Test the clear error when the history lacks the regions the booster reads."""
    with pytest.raises(ValueError, match="reads the context"):
        fitted_ctx.forecast(history, history.intensity.index[85 * 24])


def test_without_the_setting_a_context_changes_nothing(
    history: CarbonHistory, with_ctx: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test that the default config ignores a history's context (same forecast)."""
    assert fitted.context_names == ()
    origin = history.intensity.index[85 * 24]
    assert fitted.forecast(with_ctx, origin).values == fitted.forecast(history, origin).values
