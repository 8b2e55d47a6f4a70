"""Unit tests of the ``greenserve sim-engine`` command's arguments and start-up errors."""

from __future__ import annotations

import argparse

import pytest

from greenserve.commands import sim_engine


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sim_engine.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_describe_one_a100_serving_llama_3_8b_in_real_time() -> None:
    """Test that the defaults are port 8000, A100-80GB, llama-3-8b, TP 1 and speed-up 1."""
    args = _args()
    assert (args.port, args.gpu, args.model, args.tp, args.speedup) == (
        8000,
        "A100-80GB",
        "llama-3-8b",
        1,
        1.0,
    )
    assert not args.legacy_metric_names


def test_an_unknown_model_exits_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    """Test that an unsupported model shape is an exit code 2 with the reason, not a trace."""
    assert sim_engine.run(_args("--model", "no-such-model", "--port", "0")) == 2
    assert "greenserve sim-engine:" in capsys.readouterr().err
