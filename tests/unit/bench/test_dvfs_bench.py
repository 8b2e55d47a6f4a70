"""``greenserve bench dvfs`` on short workloads: every policy row, and what the rows promise."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from greenserve.bench.dvfs import run as dvfs

ROWS = (
    "fixed-1410",
    "miad-2.0-100",
    "predictive",
    "profile-filter",
    "profile-dynamollm",
    "profile",
)


def test_a_short_run_reports_every_policy_and_the_profile_rows_keep_their_promises(
    tmp_path: Path,
) -> None:
    """Test the report: rows, energy accounting, the profile rows' SLO terms, the plot."""
    parser = argparse.ArgumentParser()
    dvfs.add_arguments(parser)
    argv = ["--freesh-minutes", "1", "--throttllem-minutes", "3", "--plots", str(tmp_path)]
    report = dvfs.run(parser.parse_args(argv))
    assert report["plots"] == [str(tmp_path / "dvfs.png")]
    assert (tmp_path / "dvfs.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    for setting in ("freesh_table10", "throttllem"):
        configs = report[setting]["configs"]
        assert set(ROWS) <= set(configs)
        assert configs["fixed-1410"]["energy_saving_pct"] == 0.0
        for name in ROWS:
            row = configs[name]
            assert row["energy_wh"] > 0.0
            assert 0.0 <= row["violation_pct"] <= 100.0
            assert math.isclose(
                row["energy_saving_pct"],
                (1.0 - row["energy_wh"] / configs["fixed-1410"]["energy_wh"]) * 100.0,
                abs_tol=0.01,
            )
            assert 210.0 <= row["mean_clock_mhz"] <= 1410.0
    freesh = report["freesh_table10"]["configs"]
    # The filter alone keeps only TTFT and TBT bounds; the E2E bound may only cost energy.
    assert freesh["profile"]["violation_pct"] <= freesh["profile-filter"]["violation_pct"]
    assert freesh["profile"]["mean_clock_mhz"] >= freesh["profile-filter"]["mean_clock_mhz"]
    throttllem = report["throttllem"]["configs"]
    # An emergency only ever raises the clock.
    assert (
        throttllem["profile-dynamollm"]["mean_clock_mhz"]
        >= throttllem["profile-filter"]["mean_clock_mhz"]
    )
    summary = report["summary"]
    assert summary["profile_violation_pct"] == freesh["profile"]["violation_pct"]
