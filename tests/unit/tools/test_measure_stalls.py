"""``tools/measure_stalls.py``: how it tells stalls that coincide across CPUs."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).parents[3] / "tools" / "measure_stalls.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("measure_stalls", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_stall_coincides_when_it_overlaps_another_process_stall() -> None:
    """Test the overlap rule: any shared instant counts, touching ends do not."""
    overlaps = _tool()._overlaps
    assert overlaps((1.0, 1.01), [(1.005, 1.02)])
    assert overlaps((1.0, 1.01), [(0.99, 1.02)])
    assert not overlaps((1.0, 1.01), [(1.01, 1.02), (0.9, 1.0)])
    assert not overlaps((1.0, 1.01), [])


def test_a_short_run_reports_every_field() -> None:
    """Test that two processes sleeping for a moment give a complete, consistent report."""
    report = _tool().main(["--procs", "2", "--seconds", "0.3", "--threshold-ms", "2"])
    assert report["procs"] == 2
    late = report["late_ms"]
    assert isinstance(late, dict)
    assert 0.0 <= late["p50"] <= late["p99"] <= late["p99.9"] <= late["max"]
    assert report["stalls"] == 0 or report["coincident_share"] is not None
    assert 0.0 <= float(report["stalled_share"]) < 1.0
