"""``greenserve up --carbon-mode live|replay``: the forecaster's mode, live refused without keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenserve.argtypes import UsageError
from greenserve.cli import build_parser, main
from greenserve.commands.up import with_carbon_mode
from greenserve.stack import StackSpec, missing_live_keys, stack_launches

KEYS = {
    "EIA_API_KEY": "eia-key",
    "ELECTRICITYMAPS_API_KEY": "em-key",
    "WATTTIME_USERNAME": "wt-user",
    "WATTTIME_PASSWORD": "wt-pass",
}


def _forecaster_mode(spec: StackSpec) -> str:
    [launch] = [launch for launch in stack_launches(spec) if launch.module.endswith("forecaster")]
    return launch.settings.forecaster.mode


def test_the_flag_parses_and_sets_the_forecasters_mode() -> None:
    """Test that --carbon-mode takes live or replay (nothing else), defaults to the settings
    file's mode, and reaches the stack's forecaster as forecaster.mode."""
    parser, _ = build_parser()
    assert parser.parse_args(["up"]).carbon_mode is None
    assert parser.parse_args(["up", "--carbon-mode", "live"]).carbon_mode == "live"
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--carbon-mode", "historic"])
    spec = StackSpec(regions=("PJM", "em:DE-LU"))
    assert _forecaster_mode(with_carbon_mode(spec, None, {})) == "replay"
    assert _forecaster_mode(with_carbon_mode(spec, "replay", {})) == "replay"
    assert _forecaster_mode(with_carbon_mode(spec, "live", KEYS)) == "live"
    settings_file = StackSpec(regions=("PJM",), extra={"forecaster": {"mode": "live"}})
    assert _forecaster_mode(with_carbon_mode(settings_file, "replay", {})) == "replay"


def test_live_without_a_providers_keys_is_refused_naming_zone_provider_and_variables() -> None:
    """Test that live mode names each zone whose provider's credentials are unset (EIA's key
    for an EIA zone, Electricity Maps' for an em zone, both WattTime variables for a zone
    the settings send to WattTime), and passes once they are set."""
    zones = {"em:DE-LU": {"live_provider": "watttime", "live_code": "DE"}}
    spec = StackSpec(regions=("PJM", "em:CA-ON", "em:DE-LU"))
    spec = StackSpec(regions=spec.regions, extra={"forecaster": {"zones": zones}})
    with pytest.raises(UsageError) as refused:
        with_carbon_mode(spec, "live", {"WATTTIME_USERNAME": "wt-user"})
    message = str(refused.value)
    assert message.startswith("--carbon-mode live: zone eia:PJM reads eia, which needs EIA_API_KEY")
    assert "zone em:CA-ON reads electricitymaps, which needs ELECTRICITYMAPS_API_KEY" in message
    assert "zone em:DE-LU reads watttime, which needs WATTTIME_PASSWORD in" in message
    assert "WATTTIME_USERNAME" not in message
    assert "--carbon-mode replay" in message
    assert missing_live_keys(spec.regions, zones=zones, environ=KEYS) == []
    assert _forecaster_mode(with_carbon_mode(spec, "live", KEYS)) == "live"
    # An empty value is no key.
    assert missing_live_keys(("PJM",), environ={"EIA_API_KEY": ""}) == [
        "zone eia:PJM reads eia, which needs EIA_API_KEY in the environment"
    ]


def test_up_stops_with_one_line_and_status_2_before_starting_anything(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Test the command end to end: without EIA_API_KEY, ``up --carbon-mode live`` exits 2
    with one line on stderr and writes no state (nothing was started)."""
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)
    code = main(["up", "--carbon-mode", "live", "--regions", "PJM", "--state-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        "greenserve up: --carbon-mode live: zone eia:PJM reads eia, which needs EIA_API_KEY "
        "in the environment (set them, or use --carbon-mode replay to answer from the data "
        "files)"
    ]
    assert list(tmp_path.iterdir()) == []
