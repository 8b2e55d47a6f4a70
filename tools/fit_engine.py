"""Fit the simulated engine's coefficients on the training split of the calibration data.

Usage: ``.venv/bin/python tools/fit_engine.py [--out shared/engine/coefficients_v1.json]``

Stages (each a small least-squares fit on relative, log-ratio residuals, train split only):

1. hardware per GPU on Vidur per-layer kernel times: achieved FLOP/s and HBM shares,
   roofline sharpness, per-layer and per-token kernel costs;
2. NCCL all-reduce latency and bandwidth per (GPU, TP) on Vidur's all-reduce tables;
3. serving-stack overheads: ``splitwise`` on Splitwise's TTFT/TBT (A100 and H100), ``vllm``
   on ML.ENERGY's median ITL (H100; A100 borrows H100's host overheads, since no public
   A100 vLLM-v1 measurement exists), with ML.ENERGY's unpublished mean prompt length as a
   nuisance parameter;
4. power per GPU: A100 on Splitwise's average power, H100 on ML.ENERGY power and J/token,
   both with Splitwise's per-phase constants (prompt/token power) as anchor points.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from shared.engine.calibration import (
    CalibrationPoint,
    load_points,
    predict,
    predict_layer_s,
)
from shared.engine.clock import DEFAULT_CLOCK_SETTINGS, ClockSettings
from shared.engine.coefficients import (
    COEFFICIENTS_PATH,
    COEFFICIENTS_VERSION,
    Coefficients,
    GpuCoefficients,
    coefficients_to_dict,
)
from shared.engine.costs import CostModel
from shared.engine.hardware import gpu_spec, model_shape
from shared.paths import data_path

__all__ = ["fit", "main"]

_IDLE_W = {"A100-80GB": 63.0, "H100-80GB": 75.0}
"""Idle power per GPU (splitwise power_model_constant.yaml)."""
_PHASE_W = {"A100-80GB": (400.0, 250.0), "H100-80GB": (700.0, 380.0)}
"""Prompt-phase and token-phase power per GPU (splitwise power_model_constant.yaml)."""

Residuals = Callable[[np.ndarray], np.ndarray]


def _solve(residuals: Residuals, x0: Sequence[float], lower: Sequence[float],
           upper: Sequence[float]) -> np.ndarray:  # fmt: skip
    result = least_squares(residuals, np.asarray(x0, float), bounds=(lower, upper), loss="soft_l1",
                           f_scale=0.1)  # fmt: skip
    return np.asarray(result.x, float)


def _fit_hardware(gpu: str, points: list[CalibrationPoint]) -> GpuCoefficients:
    spec = gpu_spec(gpu)
    rows = [p for p in points if p.source == "vidur-layer" and p.gpu == gpu]
    shapes = [model_shape(p.model) for p in rows]
    measured = np.array([p.time_s for p in rows])

    def coeff(x: np.ndarray) -> GpuCoefficients:
        return GpuCoefficients(compute_efficiency=x[0], memory_efficiency=x[1],
                               roofline_sharpness=x[2], kernel_layer_s=x[3] * 1e-6,
                               kernel_token_layer_s=x[4] * 1e-9)  # fmt: skip

    def residuals(x: np.ndarray) -> np.ndarray:
        c = coeff(x)
        pred = np.array(
            [predict_layer_s(spec, m, p.tp, p.tokens, c) for p, m in zip(rows, shapes, strict=True)]
        )
        return np.log(pred / measured)  # type: ignore[no-any-return]

    x = _solve(residuals, [0.6, 0.7, 3.0, 20.0, 10.0], [0.05, 0.05, 1.0, 0.0, 0.0],
               [1.0, 1.0, 30.0, 500.0, 1000.0])  # fmt: skip
    return coeff(x)


def _fit_allreduce(
    gpu: str, points: list[CalibrationPoint]
) -> tuple[dict[str, float], dict[str, float]]:
    latency, rate = {}, {}
    for tp in (2, 4, 8):
        rows = [p for p in points if p.source == "vidur-allreduce" and p.gpu == gpu and p.tp == tp]
        size = np.array([p.tokens for p in rows], float)
        measured = np.array([p.time_s for p in rows])

        def residuals(
            x: np.ndarray, size: np.ndarray = size, measured: np.ndarray = measured
        ) -> np.ndarray:
            return np.log((x[0] * 1e-6 + size / (x[1] * 1e9)) / measured)  # type: ignore[no-any-return]

        x = _solve(residuals, [20.0, 100.0], [0.1, 1.0], [1000.0, 2000.0])
        latency[str(tp)], rate[str(tp)] = x[0] * 1e-6, x[1] * 1e9
    return latency, rate


_CLOCK = [DEFAULT_CLOCK_SETTINGS]
"""The clock model the max-clock terms are fitted under (``tools/fit_clock.py`` refits the
power terms under each candidate clock model: its active power is part of max-clock power)."""


def _costs(gpu: str, model: str, tp: int, c: GpuCoefficients) -> CostModel:
    return CostModel(gpu_spec(gpu), model_shape(model), tp, c, _CLOCK[0])


def _stack_values(x: np.ndarray) -> dict[str, Any]:
    return {
        "iteration_overhead_s": float(x[0]) * 1e-3,
        "layer_overhead_s": float(x[1]) * 1e-6,
        "token_overhead_s": float(x[2]) * 1e-6,
        "allreduce_extra_latency_s": float(x[3]) * 1e-6,
    }


def _fit_stack(base: GpuCoefficients, gpu: str, rows: list[CalibrationPoint],
               with_prompt: bool) -> tuple[dict[str, Any], float]:  # fmt: skip
    measured = np.array([p.time_s for p in rows])
    max_clock = gpu_spec(gpu).max_clock_mhz

    def residuals(x: np.ndarray) -> np.ndarray:
        c = replace(base, **_stack_values(x))
        prompt = x[4] if with_prompt else 0.0
        pred = [predict(p, _costs(gpu, p.model, p.tp, c), max_clock, prompt).time_s for p in rows]
        return np.log(np.array(pred) / measured)  # type: ignore[no-any-return]

    x = _solve(residuals, [2.0, 10.0, 1.0, 5.0, 300.0], [0.0, 0.0, 0.0, 0.0, 10.0],
               [100.0, 1000.0, 1000.0, 1000.0, 4000.0])  # fmt: skip
    return _stack_values(x), float(x[4])


def _fit_power(base: GpuCoefficients, gpu: str, rows: list[CalibrationPoint],
               prompt_tokens: float) -> GpuCoefficients:  # fmt: skip
    max_clock = gpu_spec(gpu).max_clock_mhz
    prompt_w, token_w = _PHASE_W[gpu]
    anchors = [  # (work, measured W per GPU): a 4096-token prefill and a batch-32 decode, TP4 70B
        (("prefill", 4096), prompt_w),
        (("decode", 32), token_w),
    ]

    def residuals(x: np.ndarray) -> np.ndarray:
        c = replace(base, busy_w=x[0], compute_w=x[1], memory_w=x[2])
        out = []
        for p in rows:
            pred = predict(p, _costs(gpu, p.model, p.tp, c), max_clock, prompt_tokens)
            out.append(math.log(pred.power_w / p.power_w))
            if p.j_per_token:
                out.append(math.log(pred.j_per_token / p.j_per_token))
        costs = _costs(gpu, "llama-2-70b", 4, c)
        for (kind, amount), watts in anchors:
            if kind == "prefill":
                cost = costs.cost_of(amount, 0, amount * amount / 2, amount, 1, max_clock)
            else:
                cost = costs.cost_of(0, amount, amount * 1024.0, amount * 1024, amount, max_clock)
            out.append(math.log(cost.power_w_per_gpu / watts))
        return np.array(out)

    x = _solve(residuals, [50.0, 300.0, 200.0], [0.0, 0.0, 0.0], [1000.0, 2000.0, 2000.0])
    return replace(base, busy_w=float(x[0]), compute_w=float(x[1]), memory_w=float(x[2]))


def fit(
    points: list[CalibrationPoint], clock: ClockSettings = DEFAULT_CLOCK_SETTINGS
) -> Coefficients:
    """Fit every coefficient on the ``train`` points of ``points`` under ``clock``."""
    _CLOCK[0] = clock
    train = [p for p in points if p.split == "train"]
    gpus: dict[str, GpuCoefficients] = {}
    stacks: dict[str, dict[str, dict[str, Any]]] = {"vllm": {}, "splitwise": {}}
    for gpu in ("A100-80GB", "H100-80GB"):
        hardware = _fit_hardware(gpu, train)
        latency, rate = _fit_allreduce(gpu, train)
        hardware = replace(hardware, allreduce_latency_s=latency, allreduce_bytes_per_s=rate,
                           idle_w=_IDLE_W[gpu])  # fmt: skip
        split_rows = [
            p
            for p in train
            if p.gpu == gpu and p.source in ("splitwise-prefill", "splitwise-decode")
        ]
        stacks["splitwise"][gpu], _ = _fit_stack(hardware, gpu, split_rows, with_prompt=False)
        gpus[gpu] = hardware
    h100_rows = [p for p in train if p.source == "mlenergy"]
    vllm, prompt_tokens = _fit_stack(gpus["H100-80GB"], "H100-80GB", h100_rows, with_prompt=True)
    for gpu in gpus:
        stacks["vllm"][gpu] = dict(vllm)
        gpus[gpu] = replace(gpus[gpu], **vllm)
    a100_power = [p for p in train if p.source == "splitwise-power"]
    a100 = replace(gpus["A100-80GB"], **stacks["splitwise"]["A100-80GB"])
    fitted = _fit_power(a100, "A100-80GB", a100_power, prompt_tokens)
    gpus["A100-80GB"] = replace(gpus["A100-80GB"], busy_w=fitted.busy_w, compute_w=fitted.compute_w,
                                memory_w=fitted.memory_w)  # fmt: skip
    gpus["H100-80GB"] = _fit_power(gpus["H100-80GB"], "H100-80GB", h100_rows, prompt_tokens)
    provenance = {
        "fitted_by": "tools/fit_engine.py",
        "split": "train = every calibration point whose index within its source, sorted by "
                 "key, is not 1 mod 3; test (held out) = the rest",
        "n_train": len(train),
        "mlenergy_mean_prompt_tokens": prompt_tokens,
        "a100_vllm_overheads": "borrowed from H100 (no public A100 vLLM-v1 measurement)",
    }  # fmt: skip
    return Coefficients(
        version=COEFFICIENTS_VERSION, gpus=gpus, stacks=stacks, provenance=provenance
    )


def main(argv: list[str] | None = None) -> int:
    """Fit on the calibration data and write the coefficient file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=COEFFICIENTS_PATH)
    args = parser.parse_args(argv)
    coefficients = fit(load_points(data_path("calibration")))
    text = json.dumps(coefficients_to_dict(coefficients), indent=2, sort_keys=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
