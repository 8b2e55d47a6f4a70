"""Numeric options a command cannot use when zero, negative or not numbers."""

from __future__ import annotations

import argparse

import pytest

from greenserve.argtypes import positive_float, positive_floats, positive_int
from greenserve.cli import build_parser
from greenserve.stack import StackSpec


def test_positive_numbers_are_parsed_and_the_rest_refused() -> None:
    """Test the converters on good values, zero, negatives, NaN, words and empty lists."""
    assert positive_float("2.5") == 2.5
    assert positive_int("3") == 3
    assert positive_floats("100, 200,,400") == (100.0, 200.0, 400.0)
    for bad in ("0", "-1", "nan", "abc"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_float(bad)
    for bad in ("0", "-2", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)
    for bad in ("", " , ", "100,0", "100,abc"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_floats(bad)


@pytest.mark.parametrize(
    "option", [["--rates", "0"], ["--rates", "abc"], ["--step-s", "-1"], ["--workers", "0"]]
)
def test_the_control_plane_bench_refuses_a_rate_it_cannot_run_as_a_usage_error(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Test that argparse names the option and exits 2 (a zero rate divided by zero)."""
    parser, _ = build_parser()
    with pytest.raises(SystemExit) as ended:
        parser.parse_args(["bench", "control-plane", *option])
    assert ended.value.code == 2
    assert option[0] in capsys.readouterr().err


@pytest.mark.parametrize(
    "option", [["--requests", "0"], ["--workers", "0"], ["--speedup", "0"], ["--speedup", "x"]]
)
def test_the_e2e_bench_refuses_a_size_it_cannot_run_as_a_usage_error(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Test that ``bench e2e`` names the option and exits 2 before starting a stack (with
    ``--requests 0`` it used to start one and print ``"tokens_per_joule": NaN``)."""
    parser, _ = build_parser()
    with pytest.raises(SystemExit) as ended:
        parser.parse_args(["bench", "e2e", *option])
    assert ended.value.code == 2
    assert option[0] in capsys.readouterr().err
    args = parser.parse_args(["bench", "e2e"])
    assert (args.requests, args.workers, args.speedup) == (500, 4, 10.0)


def test_the_control_plane_bench_defaults_parse() -> None:
    """Test that the string default goes through the converter too."""
    parser, _ = build_parser()
    args = parser.parse_args(["bench", "control-plane"])
    assert args.rates == (100.0, 200.0, 400.0, 800.0, 1200.0, 1600.0, 2000.0)


@pytest.mark.parametrize("command", ["up", "demo"])
def test_a_stack_refuses_regions_without_carbon_data_before_starting(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test ``--regions`` (an unknown one used to start a stack whose forecaster then died)
    and ``--workers 0`` as usage errors, and the parsed default."""
    parser, _ = build_parser()
    assert parser.parse_args([command]).regions == ("PJM", "CISO", "BPAT")
    assert parser.parse_args([command, "--regions", " MISO,PJM "]).regions == ("MISO", "PJM")
    for option in (["--regions", "PJM,NOSUCH"], ["--regions", ","], ["--workers", "0"]):
        with pytest.raises(SystemExit) as ended:
            parser.parse_args([command, *option])
        assert ended.value.code == 2
        assert option[0] in capsys.readouterr().err


def test_a_stack_spec_names_the_regions_it_has_no_data_for() -> None:
    """Test the same check for stacks built in code, per carbon source."""
    with pytest.raises(ValueError, match="no eia carbon data for region GB"):
        StackSpec(regions=("PJM", "GB"))
    assert StackSpec(regions=("GB",), extra={"forecaster": {"source": "em"}}).regions == ("GB",)
    with pytest.raises(ValueError, match="no em carbon data for region PJM"):
        StackSpec(regions=("PJM",), extra={"forecaster": {"source": "em"}})
