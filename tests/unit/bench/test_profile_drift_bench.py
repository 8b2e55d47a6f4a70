"""``greenserve bench profile-drift`` end to end on short phases."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from greenserve.bench.profile_drift import run as profile_drift

CONTROLLERS = ("fixed-max", "swept-once", "drift-resweep", "per-phase-profile")


def test_a_short_run_reports_both_orders_and_only_the_drift_agent_resweeps(
    tmp_path: Path,
) -> None:
    """Test the report's rows and accounting, who re-sweeps, and the plot."""
    parser = argparse.ArgumentParser()
    profile_drift.add_arguments(parser)
    argv = ["--phase-minutes", "2", "--drift-window", "64", "--plots", str(tmp_path)]
    report = profile_drift.run(parser.parse_args(argv))
    assert (tmp_path / "profile_drift.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert set(report["orders"]) == {"conv→code", "code→conv"}
    for order in report["orders"].values():
        configs = order["configs"]
        assert set(configs) == set(CONTROLLERS)
        base = configs["fixed-max"]
        assert base["energy_saving_pct"] == 0.0
        assert base["late_on_time_at_max_clock_pct"] == 0.0
        for row in configs.values():
            assert math.isclose(
                row["energy_saving_pct"],
                (1.0 - row["energy_wh"] / base["energy_wh"]) * 100.0,
                abs_tol=0.01,
            )
            assert [p["mix"] for p in row["phases"]] == order["order"]
            assert sum(p["requests"] for p in row["phases"]) == order["requests"]
            assert row["late_on_time_at_max_clock_pct"] <= row["late_pct"]
        assert configs["swept-once"]["resweeps"] == 0
        # The new mix is tested within a window of completions and swept once more.
        assert configs["drift-resweep"]["resweeps"] >= 1
        assert configs["drift-resweep"]["new_profile_after_change_s"] is not None
