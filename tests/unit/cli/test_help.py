"""Every command's and every benchmark's ``--help`` prints (the README points people at it)."""

from __future__ import annotations

import pytest

from greenserve.bench import discover
from greenserve.cli import build_parser

COMMANDS = sorted(build_parser()[1])
BENCHES = sorted(discover())


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    parser, _ = build_parser()
    with pytest.raises(SystemExit) as ended:
        parser.parse_args(argv)
    assert ended.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_its_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Test that ``greenserve <command> --help`` prints its usage."""
    assert f"greenserve {command}" in _help([command, "--help"], capsys)


@pytest.mark.parametrize("bench", BENCHES)
def test_every_benchmark_prints_its_help(bench: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Test that ``greenserve bench <name> --help`` prints, % signs in its help included."""
    assert f"greenserve bench {bench}" in _help(["bench", bench, "--help"], capsys)


def test_the_bench_list_names_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    """Test that ``greenserve bench --help`` lists every benchmark, with its paper figure."""
    out = _help(["bench", "--help"], capsys)
    assert all(bench in out for bench in BENCHES)
    assert "-13.07 % CO2" in out
