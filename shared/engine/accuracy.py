"""Error of the engine model against held-out calibration points (pure given the points).

Splitwise points are predicted with the ``splitwise`` stack's overheads and ML.ENERGY
points with the ``vllm`` stack's (the engine's default); hardware and power terms are
shared. See :mod:`shared.engine.calibration` for the split.
"""

from __future__ import annotations

import statistics
from typing import Any

from shared.engine.calibration import (
    CalibrationPoint,
    predict,
    predict_allreduce_s,
    predict_layer_s,
)
from shared.engine.clock import DEFAULT_CLOCK_SETTINGS, ClockSettings
from shared.engine.coefficients import Coefficients, for_stack
from shared.engine.costs import CostModel
from shared.engine.hardware import gpu_spec, model_shape

__all__ = ["evaluate"]


def _summary(errors: list[float]) -> dict[str, float]:
    if not errors:
        return {"mape": float("nan"), "median_ape": float("nan"), "p90_ape": float("nan"), "n": 0}
    ordered = sorted(errors)
    return {
        "mape": round(100.0 * statistics.fmean(ordered), 2),
        "median_ape": round(100.0 * statistics.median(ordered), 2),
        "p90_ape": round(100.0 * ordered[int(0.9 * (len(ordered) - 1))], 2),
        "n": len(ordered),
    }


def evaluate(
    points: list[CalibrationPoint],
    coefficients: Coefficients,
    split: str = "test",
    clock: ClockSettings = DEFAULT_CLOCK_SETTINGS,
) -> dict[str, Any]:
    """Return error summaries (percent) of every metric on the points of ``split``.

    ``clock`` matters at the maximum clock only through its active power (see
    :mod:`shared.engine.clock`); ``tools/fit_clock.py`` passes its candidates.
    """
    prompt_tokens = float(coefficients.provenance.get("mlenergy_mean_prompt_tokens", 500.0))
    errors: dict[str, list[float]] = {}

    def add(name: str, predicted: float, measured: float) -> None:
        errors.setdefault(name, []).append(abs(predicted - measured) / measured)

    for point in (p for p in points if p.split == split):
        spec = gpu_spec(point.gpu)
        if point.source == "vidur-layer":
            coeff = coefficients.gpus[point.gpu]
            pred = predict_layer_s(spec, model_shape(point.model), point.tp, point.tokens, coeff)
            add("vidur_layer", pred, point.time_s)
            continue
        if point.source == "vidur-allreduce":
            coeff = coefficients.gpus[point.gpu]
            key = str(point.tp)
            pred = predict_allreduce_s(
                point.tokens, coeff.allreduce_latency_s[key], coeff.allreduce_bytes_per_s[key]
            )
            add("vidur_allreduce", pred, point.time_s)
            continue
        stack = "vllm" if point.source == "mlenergy" else "splitwise"
        coeff = for_stack(coefficients, point.gpu, stack)
        costs = CostModel(spec, model_shape(point.model), point.tp, coeff, clock)
        result = predict(point, costs, spec.max_clock_mhz, prompt_tokens)
        if point.source == "splitwise-prefill":
            add("ttft", result.time_s, point.time_s)
        elif point.source == "splitwise-decode":
            add("tbt", result.time_s, point.time_s)
            add("tbt_splitwise", result.time_s, point.time_s)
        elif point.source == "splitwise-power":
            add("power", result.power_w, point.power_w)
            add("power_splitwise", result.power_w, point.power_w)
        else:
            add("tbt", result.time_s, point.time_s)
            add("tbt_mlenergy", result.time_s, point.time_s)
            add("power", result.power_w, point.power_w)
            add("power_mlenergy", result.power_w, point.power_w)
            add("j_per_token", result.j_per_token, point.j_per_token)
    return {name: _summary(values) for name, values in sorted(errors.items())}
