"""``greenserve bench engine-accuracy``: engine model error on held-out calibration points.

The shipped coefficients (``shared/engine/coefficients_v1.json``) are fitted by
``tools/fit_engine.py`` on the train split only; this bench reports on the test split (every
third point of each source, sorted by key). Goal from issue 3: TBT and TTFT median error
≤ 10 %, power ≤ 15 %.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from greenserve.bench.engine_accuracy.options import HELP, NAME, add_arguments
from shared.engine.accuracy import evaluate
from shared.engine.calibration import load_points
from shared.engine.coefficients import load_coefficients
from shared.paths import data_path

__all__ = ["HELP", "NAME", "add_arguments", "run"]

_GOALS = {"tbt_median_ape": 10.0, "ttft_median_ape": 10.0, "power_median_ape": 15.0}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Evaluate the packaged coefficients and return the error summary."""
    points = load_points(data_path("calibration"))
    coefficients = load_coefficients()
    detail = evaluate(points, coefficients, split=args.split)
    result: dict[str, Any] = {"split": args.split}
    for metric in ("tbt", "ttft", "power", "j_per_token"):
        summary = detail.get(metric, {})
        result[f"{metric}_mape"] = summary.get("mape")
        result[f"{metric}_median_ape"] = summary.get("median_ape")
    result["n_points"] = sum(
        int(v["n"]) for k, v in detail.items() if k in ("tbt", "ttft", "power", "j_per_token")
    )
    result["goals"] = {k: {"goal": g, "met": (result[k] or 1e9) <= g} for k, g in _GOALS.items()}
    result["by_source"] = detail
    result["split_rule"] = str(coefficients.provenance.get("split", ""))
    result["note"] = (
        "TBT = Splitwise token time (Llama-2-70B, A100/H100, TP2-8) + ML.ENERGY median ITL "
        "(H100, vLLM); TTFT = Splitwise prompt time; power = Splitwise average power (A100) + "
        "ML.ENERGY power (H100); J/token = ML.ENERGY. All at maximum clock; the clock "
        "response is fitted and checked by `greenserve bench engine-clock`."
    )
    for name, summary in detail.items():
        print(f"{name:>18}: median {summary['median_ape']}%  mean {summary['mape']}%  "
              f"n={summary['n']}", file=sys.stderr)  # fmt: skip
    return result
