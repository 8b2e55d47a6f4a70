"""``greenserve bench cli-help``: what it times and how it judges the goal (not the timing)."""

from __future__ import annotations

import argparse
import sys

import pytest

from greenserve.bench import discover
from greenserve.bench.cli_help import run as cli_help
from greenserve.cli import build_parser


def test_every_help_is_timed_top_level_commands_and_benchmarks() -> None:
    """Test that the list holds ``--help``, each command's and each benchmark's, once each."""
    helps = [tuple(argv) for argv in cli_help.every_help()]
    expected: set[tuple[str, ...]] = {("--help",)}
    expected |= {(name, "--help") for name in build_parser()[1]}
    expected |= {("bench", name, "--help") for name in discover()}
    assert helps[0] == ("--help",)
    assert sorted(helps) == sorted(expected)
    assert ("bench", "cli-help", "--help") in helps


def test_a_help_that_fails_fails_the_bench() -> None:
    """Test that a command exiting non-zero, or printing nothing, is an error, not a time."""
    with pytest.raises(RuntimeError, match="exited with 3"):
        cli_help.median_s([sys.executable, "-c", "raise SystemExit(3)"], repeats=1)
    with pytest.raises(RuntimeError, match="exited with 0"):
        cli_help.median_s([sys.executable, "-c", "pass"], repeats=1)
    assert cli_help.median_s([sys.executable, "-c", "pass"], repeats=2, prints=False) > 0.0


def test_the_result_holds_the_worst_the_median_and_the_goal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test a run over two real helps: the worst is one of them, and a goal no process can
    meet is reported as not met."""
    monkeypatch.setattr(cli_help, "every_help", lambda: [["--help"], ["down", "--help"]])
    result = cli_help.run(argparse.Namespace(repeats=1, goal_s=1e-6))
    assert result["helps"] == 2
    assert set(result["per_help_s"]) == {"greenserve --help", "greenserve down --help"}
    assert result["worst_help"] in result["per_help_s"]
    assert result["worst_s"] == max(result["per_help_s"].values())
    assert result["median_s"] <= result["worst_s"]
    assert result["interpreter_start_s"] > 0.0
    assert result["goal_met"] is False
