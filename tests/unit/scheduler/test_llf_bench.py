"""Tests for the FREESH Table 5 bench on the reference data."""

from __future__ import annotations

import argparse

import pytest

from greenserve.bench.llf import run as llf
from shared.paths import DataDirError, data_dir


def _args(**overrides: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    llf.add_arguments(parser)
    args = parser.parse_args(["--qps", "15"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def _have_data() -> bool:
    try:
        data_dir()
    except DataDirError:
        return False
    return True


@pytest.mark.skipif(not _have_data(), reason="reference data directory not available")
def test_llf_bench_reports_ours_beside_the_paper_and_llf_beats_fcfs_on_long_outputs() -> None:
    """Test the bench's shape and that LLF's TTFT on SL/LL is below FCFS's, as in Table 5."""
    result = llf.run(_args())
    cells = result["results"]["15"]
    assert set(cells) == {"SS", "SL", "LS", "LL"}
    for name in ("SL", "LL"):
        ours = {p: cells[name][p]["ours"] for p in ("FCFS", "LLF")}
        assert ours["LLF"]["ttft_s"] < ours["FCFS"]["ttft_s"]
        assert cells[name]["LLF"]["paper"]["ttft_s"] == llf.PAPER_TABLE5[15]["ttft_s"][name][3]
    assert result["setting"]["length_pools"]["SL"]["fallback_output_class_only"] is True
