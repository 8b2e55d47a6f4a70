"""Unit tests of settings loading and model time."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.clock import ModelClock
from shared.config import CONFIG_FILE_ENV, load_settings


def test_environment_overrides_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that GREENSERVE_<SECTION>__<FIELD> wins over the YAML file, which wins over defaults."""
    config = tmp_path / "c.yaml"
    config.write_text("worker:\n  gpu: H100-80GB\n  tp: 4\nclock:\n  speedup: 3\n")
    monkeypatch.setenv(CONFIG_FILE_ENV, str(config))
    monkeypatch.setenv("GREENSERVE_WORKER__TP", "8")
    settings = load_settings()
    assert settings.worker.gpu == "H100-80GB"
    assert settings.worker.tp == 8
    assert settings.clock.speedup == 3.0
    assert settings.router.placer == "least-loaded"


def test_unknown_settings_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test that a misspelt field fails loudly instead of being ignored."""
    with pytest.raises(ValidationError):
        load_settings(worker={"gpuu": "A100"})


def test_model_clock_scales_wall_time_by_the_speedup() -> None:
    """Test that K wall seconds are K·speedup model seconds and periods scale back."""
    clock = ModelClock(speedup=20.0, origin_wall_s=100.0, origin_model_s=1000.0)
    assert clock.model_at(101.0) == 1020.0
    assert clock.wall_period(300.0) == 15.0
