"""Numeric options a command cannot use when zero, negative or not numbers."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from greenserve.argtypes import (
    IntBetween,
    fraction,
    non_negative_float,
    non_negative_int,
    non_negative_ints,
    port,
    positive_float,
    positive_floats,
    positive_int,
    seed,
)
from greenserve.cli import build_parser, main
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


def _refuses(convert: Callable[[str], Any], *texts: str) -> None:
    for text in texts:
        with pytest.raises(argparse.ArgumentTypeError):
            convert(text)


def test_infinite_numbers_are_refused_like_nan() -> None:
    """Test that "inf" (which float() accepts) is no duration, rate or share."""
    for convert in (positive_float, non_negative_float, fraction):
        _refuses(convert, "inf", "-inf", "nan")


def test_non_negative_numbers_take_zero_and_refuse_negatives() -> None:
    """Test the converters of options whose 0 means something (a trace offset, "fit once")."""
    assert non_negative_int("0") == 0
    assert non_negative_int("7") == 7
    assert non_negative_float("0") == 0.0
    assert non_negative_float("2.5") == 2.5
    _refuses(non_negative_int, "-1", "0.5", "x", "")
    _refuses(non_negative_float, "-0.1", "x", "")


def test_a_fraction_lies_strictly_between_zero_and_one() -> None:
    """Test shares and percentiles: 0 and 1 are refused (an empty or a whole held-out set,
    a p100 SLO, a zero tolerance whose bisection never ends)."""
    assert fraction("0.9") == 0.9
    assert fraction("1e-3") == 0.001
    _refuses(fraction, "0", "1", "1.5", "-0.5", "90", "x")


def test_a_port_is_0_to_65535() -> None:
    """Test that 0 (any free port) and 65535 pass, and the rest is refused."""
    assert (port("0"), port("8000"), port("65535")) == (0, 8000, 65535)
    _refuses(port, "-1", "65536", "80.5", "http")


def test_a_seed_is_a_non_negative_whole_number() -> None:
    """Test that a seed numpy's default_rng would refuse is refused at parse time."""
    assert seed("0") == 0
    assert seed("12345678901234567890") == 12345678901234567890
    _refuses(seed, "-1", "1.5", "x")


def test_int_between_includes_both_bounds() -> None:
    """Test a count with a hard upper bound (the 48 episodes of a day)."""
    episodes = IntBetween(1, 48)
    assert (episodes("1"), episodes("48")) == (1, 48)
    _refuses(episodes, "0", "49", "2.5", "x")


def test_non_negative_ints_may_be_empty() -> None:
    """Test a list of extras: whole numbers >= 0, none when left empty."""
    assert non_negative_ints("10, 0,,40") == (10, 0, 40)
    assert non_negative_ints("") == ()
    _refuses(non_negative_ints, "10,-1", "10,x", "1.5")


BAD_VALUES: dict[Any, tuple[str, ...]] = {
    positive_int: ("0", "-3", "1.5", "x"),
    positive_float: ("0", "-1", "nan", "x"),
    non_negative_int: ("-1", "x"),
    non_negative_float: ("-1", "x"),
    fraction: ("0", "1", "x"),
    port: ("-1", "65536", "x"),
    seed: ("-1", "x"),
    positive_floats: ("10,0", "x"),
    non_negative_ints: ("10,-1", "x"),
}
"""Values each converter must refuse: zero or below where that is out of range, NaN, a word."""


def _numeric_options(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    """Every option of every command and benchmark with a ``type=``, as ``greenserve``
    builds them, with the sub-command path that reaches it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _numeric_options(sub, (*path, name))
        elif action.option_strings and action.type not in (None, str):
            yield path, action


NUMERIC_OPTIONS = [
    (path, action.option_strings[-1], action.type)
    for path, action in _numeric_options(build_parser()[0])
    if action.type in BAD_VALUES or isinstance(action.type, IntBetween)
]


def test_no_option_takes_a_bare_int_or_float() -> None:
    """Test that every numeric option has a validated type (a bare ``type=int`` lets
    ``bench llf --requests 0`` end in an IndexError), and that the walk finds them."""
    bare = [
        (" ".join(path), action.option_strings[-1])
        for path, action in _numeric_options(build_parser()[0])
        if action.type in (int, float)
    ]
    assert bare == []
    assert len(NUMERIC_OPTIONS) > 60


@pytest.mark.parametrize(
    ("path", "option", "bad"),
    [
        pytest.param(path, option, bad, id=f"{' '.join(path)} {option} {bad}")
        for path, option, convert in NUMERIC_OPTIONS
        for bad in (
            (str(convert.low - 1), str(convert.high + 1), "x")
            if isinstance(convert, IntBetween)
            else BAD_VALUES[convert]
        )
    ],
)
def test_every_numeric_option_refuses_an_out_of_range_value_as_a_usage_error(
    path: tuple[str, ...], option: str, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test every numeric option of every command and benchmark on the real parsers: a
    value out of its range is one line on stderr naming the option, exit status 2, before
    anything runs."""
    parser, _ = build_parser()
    with pytest.raises(SystemExit) as ended:
        parser.parse_args([*path, option, bad])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"greenserve {' '.join(path)}: argument {option}")


@pytest.mark.parametrize("path", sorted({path for path, _, _ in NUMERIC_OPTIONS}))
def test_every_default_is_in_its_options_range(path: tuple[str, ...]) -> None:
    """Test that the defaults (string ones go through the converter too) still parse."""
    parser, _ = build_parser()
    parser.parse_args(list(path))


def test_the_defaults_keep_their_values() -> None:
    """Test a few defaults whose meaning the new types must not change."""
    parser, _ = build_parser()
    bfio = parser.parse_args(["bench", "bfio"])
    assert (bfio.reveal_target, bfio.sweep_horizons, bfio.warmup_steps) == (0, (10, 20, 40), 500)
    assert parser.parse_args(["bench", "bfio", "--sweep-horizons", ""]).sweep_horizons == ()
    assert parser.parse_args(["bench", "freesh-pool"]).episodes == 48
    assert parser.parse_args(["bench", "forecaster"]).em_refit_days == 0
    up = parser.parse_args(["up"])
    assert (up.tp, up.gateway_port) == (1, 0)
    replay = parser.parse_args(["replay"])
    assert (replay.start, replay.duration, replay.max_requests) == (0.0, 120.0, None)
    profile = parser.parse_args(["profile"])
    assert (profile.percentile, profile.tolerance, profile.seed) == (0.9, 0.05, 0)


def test_the_cli_says_a_usage_error_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Test ``greenserve bench llf --requests 0`` (it used to end in an IndexError
    traceback): one line naming the option and where the help is, exit status 2."""
    with pytest.raises(SystemExit) as ended:
        main(["bench", "llf", "--requests", "0"])
    assert ended.value.code == 2
    assert capsys.readouterr().err == (
        "greenserve bench llf: argument --requests: '0' must be >= 1 "
        "(see greenserve bench llf --help)\n"
    )


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
    """Test the same check for stacks built in code, per carbon source: a bare code is the
    one source's with a file for it, ``source`` prefixes bare codes."""
    with pytest.raises(ValueError, match=r"zone 'NOSUCH': no data file"):
        StackSpec(regions=("PJM", "NOSUCH"))
    assert StackSpec(regions=("PJM", "GB")).regions == ("PJM", "GB")
    assert StackSpec(regions=("GB",), extra={"forecaster": {"source": "em"}}).regions == ("GB",)
    with pytest.raises(ValueError, match=r"zone em:PJM: Electricity Maps data file .* not found"):
        StackSpec(regions=("PJM",), extra={"forecaster": {"source": "em"}})
