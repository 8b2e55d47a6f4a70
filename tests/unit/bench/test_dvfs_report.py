"""The dvfs bench report's notes describe the calibration that produced its SLO."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from greenserve.bench.dvfs.report import build_report


def _setting(**extra: Any) -> dict[str, Any]:
    rows: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    return {"configs": rows, "e2e_slo_s": 60.6, **extra}


@pytest.mark.parametrize("calibration", ["poisson", "trace"])
def test_notes_describe_the_e2e_slo_of_the_calibration_used(calibration: str) -> None:
    """Test that only a trace calibration is described as max clock's own p99.

    Under the default ``--calibration poisson`` the E2E SLO is the p99 of a sustained
    Poisson max load (seed 002 §3.1, MLPerf-style), not max clock's p99 on the trace.
    """
    report = build_report(
        "A100-80GB", "llama-3-8b", {}, _setting(), _setting(calibration=calibration), 0.1
    )
    text = " ".join(report["notes"])
    assert ("max-clock run's own p99" in text) == (calibration == "trace")
    assert f"--calibration {calibration}" in text
