"""A wrong path, trace or scenario ends the CLI with one line and status 2, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
import yaml

from greenserve.cli import build_parser, main
from greenserve.commands._input_errors import BadFileError, one_line, reading
from loadgen.simulator.scenario import Scenario, load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
THREE_REGION = (SCENARIOS / "three_region.yaml").read_text()


@pytest.mark.parametrize(
    ("scenario_text", "trace", "said"),
    [
        (None, "conv", "No such file"),
        ("foo: [1,\n", "conv", "YAML syntax error"),
        ("regions: 5\n", "conv", "name: Field required; 3 more error(s): model, start_utc"),
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
    unknown trace: status 2, the reason on one line of stderr, no traceback."""
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
    assert err.count("\n") == 1
    assert "Traceback" not in err


def _simulate_error(scenario: Path, capsys: pytest.CaptureFixture[str]) -> str:
    argv = ["simulate", "--scenario", str(scenario), "--trace", "conv", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_an_invalid_scenario_is_one_line_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test that a GPU count that is not a number names the file, the field path and the
    value, where pydantic's own message takes four lines and a documentation URL."""
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(THREE_REGION.replace("{A100-80GB: 32}", "{A100-80GB: many}"))
    assert _simulate_error(scenario, capsys) == (
        f"greenserve simulate: {scenario}: regions[2].gpus.A100-80GB: Input should be a valid "
        "integer, unable to parse string as an integer (got 'many')"
    )


def test_a_yaml_syntax_error_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test that a YAML error says which file and which line (it named "<unicode string>")."""
    scenario = tmp_path / "broken.yaml"
    lines = THREE_REGION.splitlines()
    bad_line = next(i for i, line in enumerate(lines) if line.startswith("engine:")) + 1
    lines[bad_line - 1] = "engine: [max_num_seqs: 64"
    scenario.write_text("\n".join(lines) + "\n")
    err = _simulate_error(scenario, capsys)
    assert err.startswith(f"greenserve simulate: {scenario}: line ")
    assert "YAML syntax error: " in err
    assert f"from line {bad_line})" in err


def _validation_error(raw: object) -> pydantic.ValidationError:
    with pytest.raises(pydantic.ValidationError) as caught:
        Scenario.model_validate(raw)
    return caught.value


def test_one_line_counts_the_errors_it_does_not_spell_out() -> None:
    """Test a scenario with five wrong fields: the first in full, the next three by path,
    and an ellipsis for the rest; a document that is no mapping is the "(top)" field."""
    raw = yaml.safe_load(THREE_REGION)
    raw.update(name=[1], model=[2], start_utc="never", regions=[{"name": "x"}])
    text = one_line(_validation_error(raw))
    assert text == (
        "invalid Scenario: name: Input should be a valid string; "
        "4 more error(s): model, start_utc, regions[0].carbon…"
    )
    top = one_line(_validation_error([1, 2]))
    assert top.startswith("invalid Scenario: (top): Input should be a valid")


def test_reading_names_the_file_of_an_error_the_loader_raised(tmp_path: Path) -> None:
    """Test that ``reading`` turns the loader's error into one naming the path, and leaves
    other errors (a missing file says its own name) as they are."""
    scenario = tmp_path / "empty.yaml"
    scenario.write_text("")
    with pytest.raises(BadFileError) as caught, reading(scenario):
        load_scenario(scenario)
    assert caught.value.path == scenario
    assert str(caught.value).startswith(f"{scenario}: (top): Input should be a valid dict")
    with pytest.raises(FileNotFoundError), reading(scenario):
        load_scenario(tmp_path / "none.yaml")


@pytest.mark.parametrize(
    ("csv_bytes", "said"),
    [
        (b"a,b\n1,2\n", "is not an Azure-format trace: missing columns"),
        (
            b"TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n",
            "has no row with a valid timestamp and token counts",
        ),
        (b"", "is empty, not an Azure-format trace"),
        (b"\xff\xfe\x00\x81garbage\n", "'utf-8' codec can't decode byte 0xff"),
    ],
)
def test_a_trace_that_does_not_parse_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], csv_bytes: bytes, said: str
) -> None:
    """Test a CSV without the Azure columns, one without a usable row, an empty one and one
    that is not text (the loader's own errors, and pandas' decoding error, which was a
    traceback): one line naming the file once, status 2."""
    trace = tmp_path / "trace.csv"
    trace.write_bytes(csv_bytes)
    argv = ["simulate", "--trace", str(trace), "--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"greenserve simulate: {trace}")
    assert err.count(str(trace)) == 1
    assert err.count("\n") == 1
    assert said in err


def test_a_benchmark_given_an_invalid_scenario_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test ``bench sim-speed`` (whose loader no ``reading`` wraps): one line naming the
    model and the field, status 2."""
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(THREE_REGION.replace("{A100-80GB: 32}", "{A100-80GB: many}"))
    assert main(["bench", "sim-speed", "--scenario", str(scenario), "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "greenserve bench: invalid Scenario: regions[2].gpus.A100-80GB: Input should be a "
        "valid integer, unable to parse string as an integer (got 'many')\n"
    )


def test_verbose_keeps_the_traceback(tmp_path: Path) -> None:
    """Test that ``-v`` re-raises, for whoever debugs the command itself."""
    argv = ["-v", "simulate", "--scenario", str(tmp_path / "none.yaml"), "--trace", "conv"]
    with pytest.raises(FileNotFoundError):
        main([*argv, "--out", str(tmp_path)])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["up", "--gpu", "B200"], "argument --gpu: unknown GPU type 'B200'; supported: A100"),
        (["demo", "--model", "gpt-9"], "argument --model: unknown model 'gpt-9'; supported: "),
    ],
)
def test_a_stack_of_an_unknown_gpu_or_model_is_refused_before_it_starts(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """Test that ``up``/``demo`` refuse a GPU or model the engine model does not know at
    parse time (status 2, one line) instead of starting servers whose workers then fail."""
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert said in err
    assert err.count("\n") == 1


def test_a_gpu_alias_is_accepted_and_kept_as_given() -> None:
    """Test that an alias the engine model resolves (``a100``) passes unchanged."""
    args = build_parser()[0].parse_args(["up", "--gpu", "a100"])
    assert args.gpu == "a100"
