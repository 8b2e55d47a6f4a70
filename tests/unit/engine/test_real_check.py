"""The engine-vs-real-GPU comparison (shared.engine.real_check, bench engine-real)."""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from greenserve.bench.engine_real import run as engine_real
from shared.engine.real_check import (
    MEASUREMENTS_DIR,
    compare_measurement,
    engine_gpu_name,
    load_measurement,
    summarise,
)

COMPILED = MEASUREMENTS_DIR / "h100-llama-3-8b-compiled.json"


def _raw() -> dict[str, Any]:
    return load_measurement(COMPILED)


def test_shipped_runs_are_real_probe_output() -> None:
    raw = _raw()
    assert raw["gpu_name"].startswith("NVIDIA H100")
    assert raw["compiled"] is True
    kinds = {p["kind"] for p in raw["points"]}
    assert kinds == {"prefill", "decode"}
    # NVML energy was read for every point, and the firmware's cap shows on long prefills.
    assert all(p["energy_j_per_iteration"] > 0 for p in raw["points"])
    assert min(p["sm_clock_mhz"] for p in raw["points"]) < max(raw["supported_sm_clocks_mhz"])


def test_prices_each_point_in_the_engine_conventions() -> None:
    raw = copy.deepcopy(_raw())
    raw["points"] = [
        {**raw["points"][0], "kind": "prefill", "batch": 1, "tokens": 1024},
        {**raw["points"][0], "kind": "decode", "batch": 64, "tokens": 2048},
    ]
    prefill, decode = compare_measurement(raw)
    # Longer prompts and more sequences cost more; priced at the maximum clock.
    short = compare_measurement({**raw, "points": [{**raw["points"][0], "tokens": 128}]})[0]
    assert prefill.predicted_gpu_s > short.predicted_gpu_s
    assert decode.clock_mhz == 1980.0
    # The shipped model adds vLLM's host overheads on top of the hardware terms.
    assert prefill.predicted_s > prefill.predicted_gpu_s
    assert decode.predicted_s > decode.predicted_gpu_s


def test_errors_follow_the_measurement() -> None:
    raw = copy.deepcopy(_raw())
    base = summarise(compare_measurement(raw))
    for point in raw["points"]:
        point["iteration_s"] *= 2.0  # a GPU twice as slow: the model now underestimates
    slow = summarise(compare_measurement(raw))
    assert slow["tbt_hardware"]["mean_signed_pct"] < base["tbt_hardware"]["mean_signed_pct"] - 40
    assert slow["tbt_hardware"]["median_ape"] > 40


def test_refuses_unknown_gpus_shapes_and_versions(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no model of GPU"):
        engine_gpu_name("Tesla T4")
    raw = copy.deepcopy(_raw())
    raw["shape"]["layers"] = 30
    with pytest.raises(ValueError, match="layers"):
        compare_measurement(raw)
    other = tmp_path / "v9.json"
    other.write_text(json.dumps({**_raw(), "version": 9}))
    with pytest.raises(ValueError, match="version"):
        load_measurement(other)


def test_bench_reports_headline_and_both_runs(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    engine_real.add_arguments(parser)
    result = engine_real.run(parser.parse_args(["--plots", str(tmp_path)]))
    assert result["model"] == "llama-3-8b"
    assert [r["compiled"] for r in result["runs"]] == [True, False]
    for key in ("tbt_median_ape", "ttft_median_ape", "decode_power_median_ape"):
        assert isinstance(result[key], float)
    assert all(Path(p).stat().st_size > 0 for p in result["plots"])
    json.dumps(result)  # JSON-ready


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
def test_probe_runs_on_cpu(tmp_path: Path) -> None:
    from shared.gpu.decoder_probe import main

    out = tmp_path / "tiny.json"
    assert (
        main(
            ["--device", "cpu", "--tiny", "--window-s", "0.05", "--idle-s", "0", "--out", str(out)]
        )
        == 0
    )
    raw = json.loads(out.read_text())
    assert [p["kind"] for p in raw["points"]] == ["prefill", "prefill", "decode", "decode"]
    assert all(p["iteration_s"] > 0 for p in raw["points"])
