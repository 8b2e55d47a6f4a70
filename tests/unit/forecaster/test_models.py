"""Tests of the fitted carbon forecaster: labels, bounds and the no-look-ahead guard."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from services.forecaster.blend import blend, blend_weights, stacked_weights
from services.forecaster.config import BUCKETS, CANDIDATES, MIX, ForecasterConfig
from services.forecaster.features import to_grid
from services.forecaster.models import CarbonForecaster, fit_forecaster
from services.forecaster.sources import CarbonHistory


def _perturbed_after(history: CarbonHistory, cutoff: pd.Timestamp) -> CarbonHistory:
    """Return the history with every value after ``cutoff`` tripled (a fake future)."""
    values = history.intensity.copy()
    values[values.index > cutoff] *= 3.0
    mix = history.fuel_mix.copy() if history.fuel_mix is not None else None
    if mix is not None:
        mix[mix.index > cutoff] = 0.5
    generation = history.generation.copy() if history.generation is not None else None
    if generation is not None:
        generation[generation.index > cutoff] *= np.arange(1.0, len(generation.columns) + 1)
    return dataclasses.replace(history, intensity=values, fuel_mix=mix, generation=generation)


@pytest.mark.parametrize("which", ["fitted", "fitted_rg"])
def test_forecast_ignores_everything_after_one_hour_before_origin(
    history: CarbonHistory, which: str, request: pytest.FixtureRequest
) -> None:
    """Test that changing data at or after the origin leaves the forecast unchanged (also
    with the booster on template + level, bagged)."""
    fitted: CarbonForecaster = request.getfixturevalue(which)
    origin = history.intensity.index[85 * 24]
    leaked = _perturbed_after(history, origin - pd.Timedelta(hours=1))
    clean = fitted.forecast(history, origin, horizon_h=24)
    assert fitted.forecast(leaked, origin, horizon_h=24) == clean
    assert fitted.forecast(history.until(origin - pd.Timedelta(hours=1)), origin) == clean


@pytest.mark.parametrize("which", ["fitted", "fitted_rg"])
def test_forecast_uses_the_hour_just_before_origin(
    history: CarbonHistory, which: str, request: pytest.FixtureRequest
) -> None:
    """Test that the newest allowed input (origin - 1 h) does move the forecast."""
    fitted: CarbonForecaster = request.getfixturevalue(which)
    origin = history.intensity.index[85 * 24]
    moved = _perturbed_after(history, origin - pd.Timedelta(hours=2))
    assert fitted.forecast(moved, origin).values != fitted.forecast(history, origin).values


@pytest.mark.parametrize("which", ["fitted", "fitted_mix", "fitted_rg"])
def test_batch_predict_is_causal_for_every_model(
    history: CarbonHistory, which: str, request: pytest.FixtureRequest
) -> None:
    """Test that each model's batch forecast at an origin ignores values from the origin on
    (with the source-production member and feature too, and with the booster on template +
    level, bagged), and that the hour before moves it."""
    model: CarbonForecaster = request.getfixturevalue(which)
    grid = to_grid(history)
    origins = np.array([82 * 24, 84 * 24 + 7], dtype=np.int64)
    before = model.predict(grid, origins)
    if which == "fitted_mix":
        assert MIX in before
    future = grid.y.copy()
    future[origins[0] :] *= 5.0
    shares = grid.shares.copy()
    shares[origins[0] :] = 0.0
    generation = grid.generation.copy()
    generation[origins[0] :, 0] *= 7.0
    leaked = dataclasses.replace(grid, y=future, shares=shares, generation=generation)
    after = model.predict(leaked, origins[:1])
    for name, values in before.items():
        np.testing.assert_array_equal(after[name][0], values[0], err_msg=name)
    if which == "fitted_mix":
        generation[origins[0] - 1, 0] += 500.0  # SUN at 23:00 UTC: 0 MW before
        moved = model.predict(dataclasses.replace(grid, generation=generation), origins[:1])
        assert not np.array_equal(moved[MIX][0], before[MIX][0])


def test_forecast_is_labelled_and_bounded(history: CarbonHistory, fitted: CarbonForecaster) -> None:
    """Test that a forecast carries its labels, 24 hourly steps and p10 <= p90."""
    origin = history.intensity.index[86 * 24 + 5]
    forecast = fitted.forecast(history, origin)
    assert forecast.issued_at == origin
    assert (forecast.step_s, len(forecast.values)) == (3600, 24)
    assert (forecast.signal, forecast.emission_factor) == ("average", "direct")
    assert forecast.model.startswith(f"{BUCKETS[0][0]}-{BUCKETS[0][1]}h:")
    assert all(lo <= hi for lo, hi in zip(forecast.p10, forecast.p90, strict=True))
    assert forecast.times()[-1] == origin + pd.Timedelta(hours=23)


def test_fitted_forecaster_beats_seasonal_naive_on_synthetic_days(
    history: CarbonHistory, fitted: CarbonForecaster
) -> None:
    """Test that the chosen model's day-1 error is below same-hour-yesterday's."""
    grid = to_grid(history)
    origins = np.arange(81 * 24, 88 * 24, 24, dtype=np.int64)
    predicted = fitted.predict(grid, origins, 24)
    actual = grid.y[origins[:, None] + np.arange(24)[None, :]]

    def mape(name: str) -> float:
        return float(np.mean(np.abs(predicted[name] - actual) / actual))

    assert mape("chosen") < mape("same_hour_yesterday")


def test_fit_refuses_related_regions_with_other_fuel_columns(history: CarbonHistory) -> None:
    """Test that pooling a region whose fuel-mix columns differ is refused."""
    assert history.fuel_mix is not None
    other = CarbonHistory(
        region="OTHER",
        intensity=history.intensity,
        fuel_mix=history.fuel_mix.rename(columns={"SUN": "WND"}),
        signal="average",
        emission_factor="direct",
        source="synthetic",
    )
    with pytest.raises(ValueError, match="other fuel-mix columns"):
        fit_forecaster(history, config=ForecasterConfig(hw_fit_days=14), related=[other])


def test_blend_weights_favour_the_more_accurate_candidate() -> None:
    """Test that weights follow inverse validation error and each row sums to one."""
    rng = np.random.default_rng(3)
    actual = 200.0 + rng.normal(0.0, 5.0, (40, 48))
    noise = {"same_hour_yesterday": 0.20, "template_level": 0.10, "hw": 0.05, "gbm": 0.02}
    predictions = {
        name: actual * (1.0 + rng.normal(0.0, scale, actual.shape)) for name, scale in noise.items()
    }
    weights, scores = blend_weights(predictions, actual, np.ones_like(actual), 48, power=2.0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0)
    order = [
        CANDIDATES.index(name) for name in ("gbm", "hw", "template_level", "same_hour_yesterday")
    ]
    assert np.all(np.diff(weights[:, order], axis=1) < 0)
    assert all(c < t for c, t in zip(scores["chosen"], scores["template_level"], strict=True))


def test_blend_falls_back_to_template_level_where_it_loses_on_validation() -> None:
    """Test that a bucket whose blend is worse than template + level uses template + level."""
    actual = np.full((10, 48), 100.0)
    predictions = dict.fromkeys(CANDIDATES, actual * 1.5)
    predictions["template_level"] = actual.copy()
    # template + level is exact, so any blend with positive weight elsewhere loses to it.
    weights, scores = blend_weights(predictions, actual, np.ones_like(actual), 48, power=1.0)
    np.testing.assert_array_equal(weights[:, CANDIDATES.index("template_level")], 1.0)
    assert scores["chosen"] == scores["template_level"]


def test_stacked_weights_credit_members_whose_errors_cancel() -> None:
    """Test that the MAPE-fitted weights find the pair whose errors cancel exactly.

    ``a`` and ``b`` are each 10 % off in opposite directions, so ``(a + b) / 2`` is exact;
    ``c`` is 5 % off, so inverse-error weights favour it, and the fitted weights give it none.
    """
    rng = np.random.default_rng(5)
    actual = 150.0 + rng.uniform(0.0, 100.0, (30, 6))
    sign = np.where(rng.uniform(size=actual.shape) < 0.5, -1.0, 1.0)
    members = [actual * (1 + 0.1 * sign), actual * (1 - 0.1 * sign), actual * 1.05]
    weights = stacked_weights(members, actual, np.ones_like(actual))
    assert weights is not None
    np.testing.assert_allclose(weights, [0.5, 0.5, 0.0], atol=1e-6)
    masked = np.zeros_like(actual)
    assert stacked_weights(members, actual, masked) is None


def test_blend_stack_share_moves_the_weights_toward_the_fitted_ones() -> None:
    """Test share 0 (inverse-error), 1 (fitted) and 0.5 (their mean), per bucket."""
    rng = np.random.default_rng(6)
    actual = 150.0 + rng.uniform(0.0, 100.0, (30, 48))
    sign = np.where(rng.uniform(size=actual.shape) < 0.5, -1.0, 1.0)
    predictions = {
        "same_hour_yesterday": actual * (1 + 0.1 * sign),
        "template_level": actual * 1.05,
        "hw": actual * (1 - 0.1 * sign),
        "gbm": actual * 1.2,
    }
    ones = np.ones_like(actual)
    inverse, _ = blend_weights(predictions, actual, ones, 48, power=2.0)
    fitted, scores = blend_weights(predictions, actual, ones, 48, power=2.0, stack_share=1.0)
    half, _ = blend_weights(predictions, actual, ones, 48, power=2.0, stack_share=0.5)
    np.testing.assert_allclose(fitted[:, [0, 2]], 0.5, atol=1e-6)
    np.testing.assert_allclose(half, (inverse + fitted) / 2, atol=1e-9)
    assert max(scores["chosen"]) < 1e-6
    with pytest.raises(ValueError, match="stack_share"):
        blend_weights(predictions, actual, ones, 48, power=2.0, stack_share=1.5)


def test_fitted_blend_is_no_worse_than_template_level_on_validation(
    fitted: CarbonForecaster,
) -> None:
    """Test the fitted forecaster's per-bucket validation MAPE against template + level."""
    chosen, baseline = fitted.validation_mape["chosen"], fitted.validation_mape["template_level"]
    assert len(chosen) == len(BUCKETS)
    assert all(c <= t for c, t in zip(chosen, baseline, strict=True))
    assert fitted.weights.shape == (fitted.horizon_h, len(CANDIDATES))
    np.testing.assert_allclose(fitted.weights.sum(axis=1), 1.0)


def test_a_short_horizon_fit_has_one_booster_and_one_blend_per_bucket(
    history: CarbonHistory,
) -> None:
    """Test the simulator's 6-h configuration: only the 1-6 h booster and blend buckets exist."""
    config = ForecasterConfig(
        horizon_h=6, max_training_rows=5_000, hw_fit_days=14, booster_max_iter=20
    )
    short = fit_forecaster(history.until(history.intensity.index[80 * 24 - 1]), config=config)
    assert short.booster.buckets == ((1, 6),)
    assert short.weights.shape == (6, len(CANDIDATES))
    assert short.describe_choice().count("|") == sum(lo <= 6 for lo, _ in BUCKETS) - 1
    forecast = short.forecast(history, history.intensity.index[85 * 24], horizon_h=6)
    assert len(forecast.values) == 6


def test_mix_member_joins_the_blend_where_the_region_has_generation(
    history: CarbonHistory, fitted_mix: CarbonForecaster, fitted: CarbonForecaster
) -> None:
    """Test that the source-production member is a fifth blend column with its own validation
    score and fitted factors, only when asked for, and that the blend still sums to one."""
    assert fitted.candidates == CANDIDATES  # the member is off by default
    assert fitted.mix_feature  # the booster features are on by default
    assert fitted.mix_features_max_h == 24
    assert fitted.emission_factors is not None
    assert fitted_mix.candidates == (*CANDIDATES, MIX)
    assert fitted_mix.emission_factors is not None
    assert fitted_mix.emission_factors.names == ("SUN", "NG")
    assert fitted_mix.weights.shape == (fitted_mix.horizon_h, len(CANDIDATES) + 1)
    np.testing.assert_allclose(fitted_mix.weights.sum(axis=1), 1.0)
    assert len(fitted_mix.validation_mape[MIX]) == len(BUCKETS)
    chosen = fitted_mix.validation_mape["chosen"]
    baseline = fitted_mix.validation_mape["template_level"]
    assert all(c <= t for c, t in zip(chosen, baseline, strict=True))
    forecast = fitted_mix.forecast(history, history.intensity.index[85 * 24], horizon_h=24)
    assert all(np.isfinite(forecast.values))


def test_mix_member_is_left_out_for_a_history_without_generation(
    history: CarbonHistory,
) -> None:
    """Test that a region with shares only (Electricity Maps) fits the four usual members."""
    config = ForecasterConfig(
        horizon_h=6,
        max_training_rows=5_000,
        hw_fit_days=14,
        booster_max_iter=20,
        mix_member=True,
        mix_feature=True,
        mix_share_features=True,
    )
    shares_only = dataclasses.replace(history, generation=None)
    model = fit_forecaster(shares_only.until(history.intensity.index[80 * 24 - 1]), config=config)
    assert model.candidates == CANDIDATES
    assert model.emission_factors is None
    assert not model.mix_feature
    assert not model.mix_share_features
    forecast = model.forecast(shares_only, history.intensity.index[85 * 24], horizon_h=6)
    assert all(np.isfinite(forecast.values))


def test_blend_skips_a_member_without_a_value_and_renormalises() -> None:
    """Test that a NaN member (no generation at predict time) drops out of the weighted sum."""

    base = np.full((2, 4), 100.0)
    predictions = {name: base.copy() for name in (*CANDIDATES, MIX)}
    predictions["gbm"] = base * 2.0
    predictions[MIX] = np.full_like(base, np.nan)
    weights = np.tile(np.array([0.1, 0.1, 0.1, 0.2, 0.5]), (4, 1))
    blended = blend(predictions, weights, (*CANDIDATES, MIX))
    np.testing.assert_allclose(blended, 100.0 * (0.3 + 0.2 * 2.0) / 0.5)
    predictions[MIX] = base * 3.0
    np.testing.assert_allclose(
        blend(predictions, weights, (*CANDIDATES, MIX)), 100.0 * (0.3 + 0.4 + 1.5)
    )


def test_mix_booster_features_stop_at_their_longest_horizon(history: CarbonHistory) -> None:
    """Test that ``mix_features_max_h`` leaves a constant in the source-production columns of
    the longer horizons' rows and the forecast values in the others."""
    from services.forecaster.baselines import HoltWintersParams
    from services.forecaster.booster_rows import booster_matrix, reference_forecasts
    from services.forecaster.mix import fit_emission_factors

    grid = to_grid(history)
    origins = np.array([60 * 24, 61 * 24 + 5], dtype=np.int64)
    params = HoltWintersParams(alpha=0.3, beta=0.01, gamma=0.1, phi=0.9)
    template, refs = reference_forecasts(grid, origins, 48, params, fit_emission_factors(grid))
    every = booster_matrix(grid, origins, 48, template, refs, (True, True, None))
    short = booster_matrix(grid, origins, 48, template, refs, (True, True, 24))
    plain = booster_matrix(grid, origins, 48, template, refs, (False, False, None))
    mix_columns = every.shape[1] - plain.shape[1]
    assert mix_columns == 1 + len(grid.share_names)
    beyond = every[:, 0] > 24
    assert np.array_equal(short[~beyond], every[~beyond])
    assert np.all(short[beyond][:, -len(grid.share_names) :] == 0.0)
    assert np.any(every[beyond][:, -len(grid.share_names) :] != 0.0)


class _Zero:
    """A stand-in booster that predicts a log-ratio of 0 for every row."""

    def predict(self, features: np.ndarray) -> np.ndarray:
        return np.zeros(len(features))


def _with_zero_booster(model: CarbonForecaster) -> CarbonForecaster:
    from services.forecaster.gbm import RatioBooster

    buckets = model.booster.buckets
    return dataclasses.replace(
        model, booster=RatioBooster(tuple(_Zero() for _ in buckets), buckets)
    )


def test_booster_forecast_multiplies_its_base(
    history: CarbonHistory, fitted: CarbonForecaster, fitted_rg: CarbonForecaster
) -> None:
    """Test that a booster predicting 0 gives back template + level with ``booster_base =
    "template_level"`` (the default) and the 7-day template with ``"template"``."""
    from services.forecaster.baselines import seven_day_template

    assert (fitted.booster_base, fitted_rg.booster_base) == ("template", "template_level")
    grid = to_grid(history)
    origins = np.array([82 * 24, 84 * 24 + 7, 86 * 24 + 13], dtype=np.int64)
    on_level = _with_zero_booster(fitted_rg).predict(grid, origins)
    np.testing.assert_allclose(on_level["gbm"], np.maximum(on_level["template_level"], 1.0))
    on_template = _with_zero_booster(fitted).predict(grid, origins)
    np.testing.assert_allclose(on_template["gbm"], seven_day_template(grid.y, origins, 48))
    assert not np.allclose(on_template["gbm"], on_template["template_level"])


def test_booster_on_template_level_learns_the_ratio_to_it(history: CarbonHistory) -> None:
    """Test that the training target is log(actual / template + level) with the option, the
    features are unchanged, and the two targets differ by the ``lr_template_level`` feature."""
    from services.forecaster.baselines import HoltWintersParams
    from services.forecaster.booster_rows import reference_forecasts, training_rows
    from services.forecaster.features import gbm_features

    grid = to_grid(history)
    params = HoltWintersParams(alpha=0.3, beta=0.01, gamma=0.1, phi=0.9)
    end = history.intensity.index[70 * 24]
    plain = ForecasterConfig(max_training_rows=5_000, booster_base="template")
    on_level = dataclasses.replace(plain, booster_base="template_level")
    features, target, weight = training_rows([(grid, params)], end, plain)
    features_l, target_l, weight_l = training_rows([(grid, params)], end, on_level)
    np.testing.assert_array_equal(features_l, features)
    np.testing.assert_array_equal(weight_l, weight)
    template, refs = reference_forecasts(grid, np.array([30 * 24]), 48, params, False)
    _, names = gbm_features(grid, np.array([30 * 24]), 48, template, refs)
    level_column = features[:, names.index("lr_template_level")]
    assert np.abs(level_column).max() > 0.01
    np.testing.assert_allclose(target - target_l, level_column, atol=1e-12)


def test_forecaster_config_refuses_unknown_booster_options() -> None:
    """Test the checks on the booster-base settings (``booster_base``, ``booster_bag``)."""
    with pytest.raises(ValueError, match="booster_base"):
        ForecasterConfig(booster_base="hw")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="booster_bag"):
        ForecasterConfig(booster_bag=0)
