"""Loaders for the decode simulator: trace lengths and a step-time model fitted to measurements.

These are the only functions in the router package that read files; they read through
:mod:`shared.paths` and never copy data into the repository.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from greenserve.bench.bfio.decode_sim import PowerModel, StepTimeModel
from shared.paths import data_path

__all__ = [
    "SPLITWISE_POWER_W",
    "fit_splitwise_step_model",
    "load_azure_lengths",
    "splitwise_power_model",
]

SPLITWISE_POWER_W: Final = {
    "a100-80gb": {"idle": 63.0, "token": 250.0, "prompt": 400.0},
    "h100-80gb": {"idle": 75.0, "token": 380.0, "prompt": 700.0},
}
"""Per-GPU power by phase, transcribed from Splitwise ``power_model_constant.yaml`` (checked
against the file by :func:`splitwise_power_model`)."""


def load_azure_lengths(trace: str = "conv") -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Return (prompt tokens, output tokens) of the Azure 2023 trace ``code`` or ``conv``.

    Requests with zero output tokens are dropped (they never occupy a decode slot).
    """
    frame = pd.read_csv(data_path("traces", f"AzureLLMInferenceTrace_{trace}.csv"))
    frame = frame[frame["GeneratedTokens"] > 0]
    return (
        frame["ContextTokens"].to_numpy(dtype=np.int64),
        frame["GeneratedTokens"].to_numpy(dtype=np.int64),
    )


def fit_splitwise_step_model(
    model: str = "llama2-70b", hardware: str = "h100-80gb", tensor_parallel: int = 8
) -> StepTimeModel:
    """Fit the affine step time to Splitwise's measured token and prompt times.

    Decode: least squares of ``token_time`` on the mean resident KV of the measured run,
    ``batch * (prompt + token_size / 2)``. Prefill: least squares of ``prompt_time`` on
    ``batch * prompt`` through the origin.
    """
    frame = pd.read_csv(data_path("calibration", "splitwise", "perf_model.csv"))
    rows = frame[
        (frame["model"] == model)
        & (frame["hardware"] == hardware)
        & (frame["tensor_parallel"] == tensor_parallel)
    ]
    if rows.empty:
        raise ValueError(f"no Splitwise rows for {model} on {hardware} at TP{tensor_parallel}")
    kv = (rows["batch_size"] * (rows["prompt_size"] + rows["token_size"] / 2)).to_numpy(float)
    design = np.column_stack([np.ones_like(kv), kv])
    (base_ms, per_kv_ms), *_ = np.linalg.lstsq(design, rows["token_time"].to_numpy(float))
    prompt = (rows["batch_size"] * rows["prompt_size"]).to_numpy(float)
    per_prompt_ms = float(prompt @ rows["prompt_time"].to_numpy(float) / (prompt @ prompt))
    return StepTimeModel(
        base_s=float(base_ms) / 1e3,
        per_kv_token_s=float(per_kv_ms) / 1e3,
        per_prefill_token_s=per_prompt_ms / 1e3,
    )


def splitwise_power_model(hardware: str = "h100-80gb", gpus: int = 8) -> PowerModel:
    """Return a worker's decode power (busy) and idle power from Splitwise's constants.

    Raises:
        ValueError: if the transcribed constants disagree with the data file.
    """
    text = data_path("calibration", "splitwise", "power_model_constant.yaml").read_text()
    watts = SPLITWISE_POWER_W[hardware]
    for value in (watts["idle"], watts["token"]):
        if f"{hardware}: {value:g}" not in text:
            raise ValueError(f"Splitwise power constants changed for {hardware}: {value:g} W")
    return PowerModel(busy_w=gpus * watts["token"], idle_w=gpus * watts["idle"])
