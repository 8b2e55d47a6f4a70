"""Options of ``greenserve bench forecaster`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Final

from greenserve.argtypes import non_negative_int, positive_int

__all__ = ["HELP", "NAME", "REFIT_DAYS", "add_arguments"]

NAME = "forecaster"
HELP = "carbon forecaster backtest: MAPE per region and horizon bucket, best-window regret"

REFIT_DAYS: Final = 30
"""Default re-estimation cadence inside the test span, fixed a priori (monthly, as a
production forecaster refits); never tuned on test scores."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options."""
    parser.add_argument(
        "--regions",
        default="all",
        help="comma list of eia:<BA> / em:<ZONE> (or bare names), 'eia', 'em' or 'all'",
    )
    parser.add_argument(
        "--max-origins",
        type=positive_int,
        default=None,
        help="score at most N daily origins per region",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "greenserve"
        / "forecaster",
        help="where fitted models are cached",
    )
    parser.add_argument("--no-cache", action="store_true", help="always refit")
    parser.add_argument(
        "--no-pooling", action="store_true", help="fit each EIA region on its own data only"
    )
    parser.add_argument(
        "--no-extra-history",
        action="store_true",
        help="do not add the Electricity Maps 2021-2022 US zones to the EIA booster's rows",
    )
    parser.add_argument(
        "--no-mix-features",
        action="store_true",
        help="do not give the day-1 boosters the source-production (forecast fuel mix) features",
    )
    parser.add_argument(
        "--refit-days",
        type=non_negative_int,
        default=REFIT_DAYS,
        help="EIA: re-estimate the forecaster every N days inside the test span on all data "
        "before the refit origin (expanding-window rolling origin); 0: fit once",
    )
    parser.add_argument(
        "--em-refit-days",
        type=non_negative_int,
        default=0,
        help="the same for the Electricity Maps zones (default 0: one fit on 2021-2023; "
        "30 costs 13 fits a zone, about 20 min more on a busy 2-core host)",
    )
    parser.add_argument("--skip-load", action="store_true", help="skip the load-forecast part")
    parser.add_argument(
        "--screen-eia",
        action="store_true",
        help="make EIA hours with implausible total generation gaps (reporting errors; "
        "greenserve/bench/forecaster/screening.py): not trained on, not scored",
    )
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="write PNG plots there: MAPE per horizon against the baselines, and each "
        "region's day-ahead forecast over the test span's last three weeks",
    )
