"""Grid zones by configuration (shared/zones.py): a zone is a data file plus a few settings,
usable in ``greenserve up``, ``simulate`` and ``bench forecaster`` without a code change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from greenserve.bench.forecaster import run as bench_forecaster
from greenserve.cli import build_parser
from greenserve.stack import StackSpec, stack_launches
from loadgen.simulator import carbon as sim_carbon
from services.forecaster.baselines import seven_day_template
from services.forecaster.features import gbm_features, to_grid
from services.forecaster.sources import load_zone
from shared.paths import DATA_DIR_ENV
from shared.zones import ZoneError, ZoneRegistry, ZoneSettings
from tests.zone_files import write_eia_csv, write_em_csv


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data directory with an EIA file for ERCO and XYZA (a BA without a default time
    zone), Electricity Maps files for KR, and both kinds for DUP."""
    write_eia_csv(tmp_path, "ERCO", "2022-06-01", 24 * 60)
    write_eia_csv(tmp_path, "XYZA", "2022-06-01", 24 * 60)
    write_eia_csv(tmp_path, "DUP", "2022-06-01", 48)
    write_em_csv(tmp_path, "KR", 2023, 24 * 30)
    write_em_csv(tmp_path, "KR", 2024, 24 * 30)
    write_em_csv(tmp_path, "DUP", 2023, 48)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("GREENSERVE_CONFIG", raising=False)
    _clear_caches()
    yield tmp_path
    # The registries are cached per process: later tests must see the real data again.
    _clear_caches()


def _clear_caches() -> None:
    bench_forecaster._registry.cache_clear()
    sim_carbon._registry.cache_clear()
    sim_carbon.zone_history.cache_clear()


def test_a_zone_is_its_file_and_settings(data_dir: Path) -> None:
    """Test that eia:ERCO and em:KR resolve from their files (KR's two years), with the US
    zone on NERC holidays in its default time zone and KR without holidays."""
    registry = ZoneRegistry.from_settings()
    erco = registry.resolve("eia:ERCO")
    assert (erco.code, erco.files, erco.holidays, erco.timezone) == (
        "ERCO",
        (data_dir / "carbon" / "ERCO.csv",),
        "nerc",
        "America/Chicago",
    )
    kr = registry.resolve("em:KR")
    assert [f.name for f in kr.files] == ["KR_2023.csv", "KR_2024.csv"]
    assert kr.holidays == "none"
    assert kr.holiday_tz == ""
    history = load_zone(kr)
    assert history.region == "KR"
    assert len(history.intensity) == 365 * 24 + 30 * 24  # 2023 January to 2024 January
    assert set(registry.available()) >= {"eia:ERCO", "em:KR", "eia:DUP", "em:DUP"}


def test_a_bare_code_resolves_only_when_one_source_has_it(data_dir: Path) -> None:
    """Test that ERCO and KR resolve bare, that DUP (files of both sources) is refused with
    both names, and that an unknown zone names the files looked for and the setting."""
    registry = ZoneRegistry.from_settings()
    assert registry.resolve("ERCO").name == "eia:ERCO"
    assert registry.resolve("KR").name == "em:KR"
    with pytest.raises(ZoneError, match=r"ambiguous.*write eia:DUP or em:DUP"):
        registry.resolve("DUP")
    with pytest.raises(ZoneError) as unknown:
        registry.resolve("em:NOPE")
    text = str(unknown.value)
    assert str(data_dir / "carbon_em" / "NOPE_<year>.csv") in text
    assert "forecaster.zones.'em:NOPE'.files" in text
    with pytest.raises(ZoneError, match="unknown source 'xx'"):
        registry.resolve("xx:ERCO")
    utc = ZoneRegistry.from_settings({"eia:DUP": ZoneSettings(timezone="UTC")})
    with pytest.raises(ZoneError, match="share the code DUP"):
        utc.resolve_all(["eia:DUP", "em:DUP"])


def test_a_us_zone_without_a_time_zone_is_refused_until_its_settings_give_one(
    data_dir: Path,
) -> None:
    """Test that XYZA (EIA, so US, not in the default table) does not silently lose its
    holidays: refused with the setting to add, then, given America/Denver, its history
    flags Independence Day on Denver's date (06:00 UTC July 4 to 05:00 UTC July 5)."""
    with pytest.raises(ZoneError, match=r"forecaster.zones.'eia:XYZA'.timezone"):
        ZoneRegistry.from_settings().resolve("eia:XYZA")
    registry = ZoneRegistry.from_settings({"eia:XYZA": ZoneSettings(timezone="America/Denver")})
    history = load_zone(registry.resolve("eia:XYZA"))
    assert history.holiday_tz == "America/Denver"
    grid = to_grid(history)
    origin = np.array([grid.index_of(pd.Timestamp("2022-07-04 00:00", tz="UTC"))])
    template = seven_day_template(grid.y, origin, 48)
    features, names = gbm_features(grid, origin, 48, template, {}, holidays=True)
    flags = features.reshape(48, -1)[:, names.index("holiday_target")]
    assert np.flatnonzero(flags).tolist() == list(range(6, 30))
    # Saying the zone has no holidays is the other way out; a bad time zone is refused.
    quiet = ZoneRegistry.from_settings({"eia:XYZA": ZoneSettings(holidays="none")})
    assert quiet.resolve("eia:XYZA").holiday_tz == ""
    wrong = ZoneRegistry.from_settings({"eia:XYZA": ZoneSettings(timezone="Mars/Olympus")})
    with pytest.raises(ZoneError, match="not an IANA name"):
        wrong.resolve("eia:XYZA")


def test_settings_name_files_outside_the_data_directory(data_dir: Path, tmp_path: Path) -> None:
    """Test that a zone's ``files`` setting is read instead of the data directory's, and
    that a settings key without its source is refused."""
    other = tmp_path / "elsewhere"
    path = write_eia_csv(other, "ERCO", "2021-01-01", 48)
    registry = ZoneRegistry.from_settings({"eia:NEWB": ZoneSettings(files=(path,), timezone="UTC")})
    history = load_zone(registry.resolve("eia:NEWB"))
    assert history.intensity.index[0] == pd.Timestamp("2021-01-01", tz="UTC")
    assert history.region == "NEWB"
    with pytest.raises(ZoneError, match="needs its source"):
        ZoneRegistry.from_settings({"NEWB": ZoneSettings()})


def test_up_takes_eia_and_em_zones_by_name(data_dir: Path) -> None:
    """Test ``greenserve up --regions eia:ERCO,em:KR``: parsed, and the stack runs pools
    and workers named by the codes while the forecaster gets the zone names; a bare DUP is
    a usage error that says how to write it."""
    parser, _ = build_parser()
    args = parser.parse_args(["up", "--regions", "eia:ERCO,em:KR", "--workers", "2"])
    assert args.regions == ("eia:ERCO", "em:KR")
    launches = stack_launches(StackSpec(regions=args.regions, workers=2))
    workers = [launch.settings.worker for launch in launches if launch.module == "services.worker"]
    assert [(w.region, w.pool_id) for w in workers] == [("ERCO", "erco-a100"), ("KR", "kr-a100")]
    forecaster = next(launch for launch in launches if launch.name == "forecaster")
    assert forecaster.settings.forecaster.regions == ("eia:ERCO", "em:KR")
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--regions", "DUP"])


def test_the_settings_file_supplies_zone_settings_to_up(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that XYZA, refused without a time zone, is taken once the settings file gives
    one, and that its forecaster settings reach the stack's processes."""
    parser, _ = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--regions", "eia:XYZA"])
    config = tmp_path / "settings.yaml"
    config.write_text("forecaster:\n  zones:\n    eia:XYZA:\n      timezone: America/Denver\n")
    monkeypatch.setenv("GREENSERVE_CONFIG", str(config))
    args = parser.parse_args(["up", "--regions", "eia:XYZA"])
    from greenserve.commands._stack_args import spec_from_args

    launches = stack_launches(spec_from_args(args))
    forecaster = next(launch for launch in launches if launch.name == "forecaster")
    assert forecaster.settings.forecaster.zones["eia:XYZA"].timezone == "America/Denver"


def test_bench_and_simulate_take_any_zone(data_dir: Path) -> None:
    """Test ``bench forecaster --regions`` (names resolved, a bare code by its file, an
    unknown one refused with what is missing) and the simulator's carbon lookup."""
    assert bench_forecaster._regions("eia:ERCO,KR") == ["eia:ERCO", "em:KR"]
    with pytest.raises(SystemExit, match="--regions: zone 'NOPE': no data file"):
        bench_forecaster._regions("NOPE")
    history, train_end = bench_forecaster._load("em:KR")
    assert history.intensity.index[0] < train_end < history.intensity.index[-1]
    sim_carbon.check_zones(["eia:ERCO", "KR"])
    with pytest.raises(ZoneError, match="em:NOPE"):
        sim_carbon.check_zones(["em:NOPE"])
    start = pd.Timestamp("2022-06-10 12:00", tz="UTC").to_pydatetime()
    erco = sim_carbon.CarbonClock.from_eia([("r1", "eia:ERCO")], start, 7200.0)
    expected = load_zone(ZoneRegistry.from_settings().resolve("eia:ERCO")).intensity
    assert erco.intensity("r1", 0.0) == pytest.approx(float(expected.loc[start]))
