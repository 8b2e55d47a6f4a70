"""Tests of the forecaster service's start-up fits: cut, cache reuse, and a region that
cannot be fitted."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from services.forecaster import service
from services.forecaster.config import ForecasterConfig, config_for
from services.forecaster.models import CarbonForecaster
from services.forecaster.service import (
    fit_cut,
    load_or_fit_regions,
    refit_cut,
    replay_origin,
    usable_zones,
)
from services.forecaster.sources import CarbonHistory
from shared.counters import ERRORS
from shared.zones import ZoneRegistry
from tests.unit.forecaster.conftest import synthetic_history
from tests.zone_files import write_eia_csv, write_em_csv


def test_fit_cut_ends_an_hour_before_the_current_hour() -> None:
    """Test that a fit at 10:59:59 may use history up to 09:00, not the running hour."""
    now = pd.Timestamp("2022-07-01 10:59:59", tz="UTC").timestamp()
    assert fit_cut(now) == pd.Timestamp("2022-07-01 09:00", tz="UTC")


def test_a_refit_is_due_every_refit_days_of_model_time_after_the_models_data_end() -> None:
    """Test the cadence: not before 30 days past the models' data end, then the new cut;
    never without a first fit or with the cadence off."""
    fitted = pd.Timestamp("2022-07-01 09:00", tz="UTC")
    day = 86_400.0
    start = pd.Timestamp("2022-07-01 10:30", tz="UTC").timestamp()
    assert refit_cut(fitted, start, 30.0) is None
    assert refit_cut(fitted, start + 29.9 * day, 30.0) is None
    assert refit_cut(fitted, start + 30 * day, 30.0) == fitted + pd.Timedelta(days=30)
    assert refit_cut(None, start + 90 * day, 30.0) is None
    assert refit_cut(fitted, start + 90 * day, 0.0) is None


def test_fits_are_stored_and_a_second_start_loads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that each region is fitted once into the cache, that a later start with the same
    regions and cut loads every model without fitting, and that a region whose history is
    too short is reported as such while the others are still fitted."""
    histories = {
        "SYN": synthetic_history(days=90),
        "SHORT": dataclasses.replace(synthetic_history(days=20, seed=3), region="SHORT"),
    }
    cut = histories["SYN"].intensity.index[-1]
    first = dict(load_or_fit_regions(histories, "synthetic", cut, tmp_path))
    assert isinstance(first["SYN"], CarbonForecaster)
    assert isinstance(first["SHORT"], ValueError)
    assert len(list(tmp_path.glob("SYN-*.pkl"))) == 1

    def refuse(*_: object, **__: object) -> CarbonForecaster:
        raise ValueError("fitted again instead of loading the cached model")

    monkeypatch.setattr(service, "fit_region", refuse)
    # The key names the pooled regions, so the second start asks for the same set.
    again = dict(load_or_fit_regions(histories, "synthetic", cut, tmp_path))
    assert isinstance(again["SYN"], CarbonForecaster), again["SYN"]
    assert isinstance(again["SHORT"], ValueError)
    assert again["SYN"].weights.tolist() == first["SYN"].weights.tolist()


def test_electricity_maps_fits_use_the_booster_without_the_fifth_round_levers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that the service fits an Electricity Maps region with ``config_for("em")`` (the
    template ratio, one booster) and an EIA region with the default settings."""
    seen: dict[str, ForecasterConfig] = {}

    def record(history: CarbonHistory, **kwargs: object) -> CarbonForecaster:
        config = kwargs["config"]
        assert isinstance(config, ForecasterConfig)
        seen[history.region] = config
        raise ValueError("recorded")

    monkeypatch.setattr(service, "fit_forecaster", record)
    histories = {"SYN": synthetic_history(days=90)}
    cut = histories["SYN"].intensity.index[-1]
    for source in ("em", "eia"):
        list(load_or_fit_regions(histories, source, cut, None))
        assert seen["SYN"] == config_for(source)
    assert config_for("em").booster_base == "template"
    assert config_for("em").booster_bag == 1
    assert not config_for("em").holiday_features
    assert config_for("eia") == ForecasterConfig()
    assert config_for("eia").holiday_features


def test_a_replay_answers_from_inside_the_data(history: CarbonHistory) -> None:
    """Test the replay origin: the clock's hour inside the data, the hour after the data's
    end past it, and a day after its start before it."""
    index = history.intensity.index
    inside = index[500] + pd.Timedelta(minutes=20)
    assert replay_origin(inside.timestamp(), history) == index[500]
    after = index[-1] + pd.Timedelta(days=400)
    assert replay_origin(after.timestamp(), history) == index[-1] + pd.Timedelta(hours=1)
    before = index[0] - pd.Timedelta(days=400)
    assert replay_origin(before.timestamp(), history) == index[0] + pd.Timedelta(days=1)


def test_an_unusable_zone_is_counted_and_the_others_are_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Test that a zone without a file and a second zone for one code are logged with what
    is wrong and counted, and the usable zone is kept."""
    write_eia_csv(tmp_path, "ERCO", "2022-06-01", 48)
    write_em_csv(tmp_path, "ERCO", 2022, 48)
    registry = ZoneRegistry.from_settings(folder=tmp_path)
    before = ERRORS.labels("forecaster", "zone_unusable")._value.get()
    zones = usable_zones(registry, ["eia:ERCO", "em:NOPE", "em:ERCO"], None)
    assert [zone.name for zone in zones] == ["eia:ERCO"]
    assert ERRORS.labels("forecaster", "zone_unusable")._value.get() == before + 2
    assert "carbon_em/NOPE_<year>.csv" in caplog.text
    assert "eia:ERCO already names region ERCO" in caplog.text
