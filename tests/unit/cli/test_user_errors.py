"""A wrong path, trace or scenario ends the CLI with one line and status 2, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenserve.cli import main

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


@pytest.mark.parametrize(
    ("scenario_text", "trace", "said"),
    [
        (None, "conv", "No such file"),
        ("foo: [1,\n", "conv", "while parsing"),
        ("regions: 5\n", "conv", "validation error"),
        ("three_region.yaml", "no-such-trace", "trace 'no-such-trace' is neither"),
    ],
)
def test_simulate_says_what_is_wrong_with_its_inputs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    scenario_text: str | None,
    trace: str,
    said: str,
) -> None:
    """Test a missing scenario, one that is not YAML, one that does not validate, and an
    unknown trace: status 2, the reason on stderr, no traceback."""
    if scenario_text is not None and scenario_text.endswith(".yaml"):
        scenario = SCENARIOS / scenario_text
    else:
        scenario = tmp_path / "scenario.yaml"
        if scenario_text is not None:
            scenario.write_text(scenario_text)
    argv = ["simulate", "--scenario", str(scenario), "--trace", trace, "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("greenserve simulate: ")
    assert said in err
    assert "Traceback" not in err


def test_verbose_keeps_the_traceback(tmp_path: Path) -> None:
    """Test that ``-v`` re-raises, for whoever debugs the command itself."""
    argv = ["-v", "simulate", "--scenario", str(tmp_path / "none.yaml"), "--trace", "conv"]
    with pytest.raises(FileNotFoundError):
        main([*argv, "--out", str(tmp_path)])
