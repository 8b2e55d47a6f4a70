"""``greenserve bench cluster`` on a tiny scenario and a hostile Azure-format CSV."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from greenserve.argtypes import UsageError
from greenserve.bench.cluster import run as cluster

SCENARIO = """\
name: tiny
model: llama-3-8b
start_utc: "2022-06-15T18:00:00Z"
regions:
  - {name: CISO, carbon: CISO, gpus: {H100-80GB: 8}}
  - {name: BPAT, carbon: BPAT, gpus: {H100-80GB: 8}}
engine: {max_num_seqs: 8}
control: {sample_period_s: 5.0, scale_period_s: 30.0}
"""
HUGE = 5
"""Prompts longer than Llama-3-8B's 8k context."""
EMPTY_OUTPUTS = 4


def _files(tmp_path: Path) -> tuple[Path, Path]:
    """A 60-s trace, shuffled, with huge prompts and zero-length outputs."""
    rng = np.random.default_rng(7)
    n = 150
    times = rng.uniform(0.0, 60.0, n)
    prompts = rng.integers(50, 1500, n)
    outputs = rng.integers(5, 120, n)
    prompts[:HUGE] = 200_000
    outputs[HUGE : HUGE + EMPTY_OUTPUTS] = 0
    stamps = pd.Timestamp("2023-11-16 18:00:00") + pd.to_timedelta(times, unit="s")
    frame = pd.DataFrame(
        {"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": prompts,
         "GeneratedTokens": outputs}
    )  # fmt: skip
    trace = tmp_path / "hostile.csv"
    frame.sample(frac=1.0, random_state=3).to_csv(trace, index=False)
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    return trace, scenario


def _run(*argv: str) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    cluster.add_arguments(parser)
    args = parser.parse_args(
        [*argv, "--policy", "max-clock-fcfs-rr", "--no-options", "--no-progress"]
    )
    return cluster.run(args)


def test_a_hostile_trace_runs_and_reports_sized_baselines_and_counted_refusals(
    tmp_path: Path,
) -> None:
    """Test that huge prompts and empty outputs are counted refusals, and the baseline is
    the searched TP8 size with its rule, beside the labelled whole-inventory row."""
    trace, scenario = _files(tmp_path)
    out = _run("--trace", str(trace), "--scenario", str(scenario), "--duration", "60")
    assert out["rejected"]["by_reason"] == {"empty_output": EMPTY_OUTPUTS, "too_long": HUGE}
    base = out["baseline"]
    assert base["size_found"]
    assert base["gpus"] == 8 * base["instances"]
    # Sized and reported on the servable requests; the refusals count as misses in _all only.
    assert base["slo_attainment_pct"] >= 99.0
    servable = (out["requests"] - HUGE) / out["requests"]
    assert base["slo_attainment_all_pct"] == pytest.approx(base["slo_attainment_pct"] * servable)
    assert "rejected" in out["slo_basis"]
    assert str(base["instances"]) in base["probes_slo_pct"]
    assert "smallest" in base["sized_by"]
    full = out["baseline_full_fleet"]
    assert full["instances"] == 2
    assert "secondary" in full["label"]
    assert out["carbon_aware_baseline"]["region"] == "BPAT"  # the hydro grid
    assert set(out["multi_pool"]["class_instances"].values()) >= {1}
    headline = out["headline"]
    assert headline["policy"] == "max-clock-fcfs-rr"
    saving = 100.0 * (1.0 - headline["energy_wh"] / base["energy_wh"])
    assert headline["energy_saving_pct"] == pytest.approx(saving)
    assert headline["slo_attainment_all_pct"] < headline["slo_attainment_pct"]


def test_a_window_reports_only_its_own_arrivals(tmp_path: Path) -> None:
    """Test that --window counts requests arriving in it, after a warm-up on earlier ones."""
    trace, scenario = _files(tmp_path)
    whole = _run("--trace", str(trace), "--scenario", str(scenario), "--duration", "60")
    part = _run("--trace", str(trace), "--scenario", str(scenario), "--window", "30:60")
    assert part["window_s"] == {"start": 30.0, "end": 60.0, "warmup": 30.0}
    assert 0 < part["requests"] < whole["requests"]
    assert part["baseline"]["energy_wh"] < whole["baseline"]["energy_wh"]


def test_a_header_only_trace_and_a_bad_window_are_one_line_errors(tmp_path: Path) -> None:
    """Test the errors the CLI prints on one line (exit status 2)."""
    _, scenario = _files(tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n", encoding="utf-8")
    with pytest.raises(UsageError, match="no request rows"):
        _run("--trace", str(empty), "--scenario", str(scenario))
    with pytest.raises(argparse.ArgumentTypeError):
        cluster.parse_window("60:30")
    with pytest.raises(UsageError, match="not both"):
        _run("--trace", str(empty), "--window", "0:10", "--duration", "10")
