"""Calibration points from the public measurements, and the model's prediction of each.

Loaders read ``calibration/`` under the data directory (explicit I/O; everything else
here is pure). Every point carries a deterministic ``split``: after sorting each source's
points by their key, every third point (index ≡ 1 mod 3) is held out as ``test``; the
shipped coefficients are fitted on ``train`` only, and ``greenserve bench engine-accuracy``
reports on ``test``.

Sources:

- ``vidur-layer``: per-operator kernel times of one transformer layer (Llama-2-7B/70B,
  A100/H100, TP 1–8), summed without attention → the hardware roofline terms.
- ``vidur-allreduce``: NCCL all-reduce times on one DGX node → ``α``, ``β`` per TP.
- ``splitwise-prefill`` / ``splitwise-decode``: measured prompt time (TTFT) and token time
  (TBT) of Llama-2-70B on DGX A100/H100, TP 2/4/8.
- ``splitwise-power``: average power over a request, normalised to TDP (A100 only; rows
  below 1.1 × idle are measurement-window artefacts and are dropped).
- ``mlenergy``: ML.ENERGY v3 (vLLM, H100): steady-state median ITL, power, J/token by batch.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path

from shared.engine.coefficients import GpuCoefficients
from shared.engine.costs import CostModel, roofline
from shared.engine.hardware import GpuSpec, ModelShape, gpu_spec

__all__ = [
    "CalibrationPoint",
    "Prediction",
    "load_points",
    "mape",
    "predict",
    "predict_allreduce_s",
    "predict_layer_s",
]

_LAYER_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
_MLENERGY_MODELS = {
    "Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "Llama-3.3-70B-Instruct": "llama-3.1-70b",
    "Qwen3-8B": "qwen3-8b",
    "Qwen3-32B": "qwen3-32b",
}
_GPU_NAMES = {"a100": "A100-80GB", "a100-80gb": "A100-80GB", "h100": "H100-80GB",
              "h100-80gb": "H100-80GB", "H100": "H100-80GB"}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationPoint:
    """One measured configuration and its measured values."""

    source: str
    gpu: str
    model: str
    tp: int
    tokens: int = 0
    """Prefill tokens (layer, prefill) or all-reduce bytes."""
    batch: float = 0.0
    context: float = 0.0
    """Mean context length of the decoding sequences."""
    output_len: float = 0.0
    time_s: float = 0.0
    power_w: float = 0.0
    """Total power of the instance (all GPUs); 0 when not measured."""
    j_per_token: float = 0.0
    split: str = "train"


@dataclass(frozen=True, slots=True)
class Prediction:
    """The model's values for one point (0 where the point measured nothing)."""

    time_s: float
    power_w: float
    j_per_token: float


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _vidur_layers(root: Path) -> list[CalibrationPoint]:
    points = []
    for gpu in ("a100", "h100"):
        for model in ("Llama-2-7b-hf", "Llama-2-70b-hf"):
            for row in _read_csv(root / "vidur" / f"{gpu}_{model}_mlp.csv"):
                total_ms = sum(float(row[f"time_stats.{op}.median"]) for op in _LAYER_OPS)
                points.append(CalibrationPoint(
                    source="vidur-layer", gpu=_GPU_NAMES[gpu], model=model,
                    tp=int(row["num_tensor_parallel_workers"]), tokens=int(row["num_tokens"]),
                    time_s=total_ms / 1e3,
                ))  # fmt: skip
    return points


def _vidur_allreduce(root: Path) -> list[CalibrationPoint]:
    points = []
    for gpu in ("a100", "h100"):
        for row in _read_csv(root / "vidur" / f"{gpu}_dgx_all_reduce.csv"):
            workers = int(row["num_workers"])
            if workers != int(row["devices_per_node"]) or workers > 8:
                continue  # single-node TP groups only, as the engine models
            points.append(CalibrationPoint(
                source="vidur-allreduce", gpu=_GPU_NAMES[gpu], model="", tp=workers,
                tokens=int(float(row["size"])) * 2,  # bf16 elements → bytes
                time_s=float(row["time_stats.all_reduce.median"]) / 1e3,
            ))  # fmt: skip
    return points


def _splitwise(root: Path) -> list[CalibrationPoint]:
    groups: dict[tuple[str, int, int, int, int], list[dict[str, str]]] = {}
    for row in _read_csv(root / "splitwise" / "perf_model.csv"):
        if row["model"] != "llama2-70b" or row["hardware"] not in ("a100-80gb", "h100-80gb"):
            continue
        key = (row["hardware"], int(row["tensor_parallel"]), int(row["prompt_size"]),
               int(row["batch_size"]), int(row["token_size"]))  # fmt: skip
        groups.setdefault(key, []).append(row)
    points = []
    for (hw, tp, prompt, batch, out), rows in groups.items():
        gpu = gpu_spec(_GPU_NAMES[hw])

        def mean(col: str, rows: list[dict[str, str]] = rows) -> float:
            return sum(float(r[col]) for r in rows) / len(rows)

        prompt_s, token_s = mean("prompt_time") / 1e3, mean("token_time") / 1e3
        if batch == 64 and prompt_s * 1e3 < 10 * prompt:
            continue  # batch-64 prompt runs that fell over (time drops 8x): not a measurement
        base = CalibrationPoint(
            source="", gpu=gpu.name, model="llama-2-70b", tp=tp, batch=float(batch),
            context=prompt + out / 2, output_len=float(out), tokens=prompt * batch,
        )  # fmt: skip
        points.append(replace(base, source="splitwise-prefill", time_s=prompt_s))
        points.append(replace(base, source="splitwise-decode", time_s=token_s))
        power = mean("average_power") * gpu.tdp_w
        if power > 1.1 * gpu.idle_w:
            points.append(replace(base, source="splitwise-power", power_w=power * tp,
                                  time_s=prompt_s + token_s * out))  # fmt: skip
    return points


def _mlenergy(root: Path) -> list[CalibrationPoint]:
    points = []
    for path in sorted((root / "mlenergy").glob("*.json")):
        name = path.name.split("__")[1]
        if name not in _MLENERGY_MODELS:
            continue
        for conf in json.loads(path.read_text(encoding="utf-8"))["configurations"]:
            if conf["gpu_model"] not in _GPU_NAMES:
                continue
            points.append(CalibrationPoint(
                source="mlenergy", gpu=_GPU_NAMES[conf["gpu_model"]],
                model=_MLENERGY_MODELS[name], tp=int(conf["parallelization"]["tensor_parallel"]),
                batch=float(conf["avg_batch_size"]), output_len=float(conf["avg_output_len"]),
                time_s=float(conf["median_itl_ms"]) / 1e3, power_w=float(conf["avg_power_watts"]),
                j_per_token=float(conf["energy_per_token_joules"]),
            ))  # fmt: skip
    return points


def _with_splits(points: list[CalibrationPoint]) -> list[CalibrationPoint]:
    by_source: dict[str, list[CalibrationPoint]] = {}
    for point in points:
        by_source.setdefault(point.source, []).append(point)
    out = []
    for group in by_source.values():
        group.sort(key=lambda p: (p.gpu, p.model, p.tp, p.tokens, p.batch, p.context, p.time_s))
        for index, point in enumerate(group):
            split = "test" if index % 3 == 1 else "train"
            out.append(replace(point, split=split))
    return out


def load_points(calibration_dir: Path) -> list[CalibrationPoint]:
    """Load every calibration point under ``calibration_dir``, with its train/test split."""
    points = (
        _vidur_layers(calibration_dir)
        + _vidur_allreduce(calibration_dir)
        + _splitwise(calibration_dir)
        + _mlenergy(calibration_dir)
    )
    return _with_splits(points)


def predict_layer_s(
    gpu: GpuSpec, model: ModelShape, tp: int, tokens: int, coeff: GpuCoefficients
) -> float:
    """Predict Vidur's per-layer linear-operator time (no attention, no all-reduce)."""
    params = model.params_per_layer
    compute = 2.0 * params / tp * tokens / (gpu.peak_bf16_flops * coeff.compute_efficiency)
    memory = params * model.bytes_per_param / tp / (gpu.hbm_bytes_per_s * coeff.memory_efficiency)
    return (
        roofline(compute, memory, coeff.roofline_sharpness)
        + coeff.kernel_layer_s
        + coeff.kernel_token_layer_s * tokens
    )


def predict_allreduce_s(size_bytes: float, latency_s: float, bytes_per_s: float) -> float:
    """Predict one NCCL all-reduce: fixed latency plus size over bus bandwidth."""
    return latency_s + size_bytes / bytes_per_s


def predict(point: CalibrationPoint, costs: CostModel, max_clock_mhz: float,
            mean_prompt_tokens: float) -> Prediction:  # fmt: skip
    """Predict an end-to-end point (splitwise or ML.ENERGY) with an instance cost model.

    ``mean_prompt_tokens`` is the mean prompt length of ML.ENERGY's chat workload, which the
    dataset does not publish; the fit estimates it on the training points.
    """
    f = max_clock_mhz
    tp = costs.tp
    if point.source == "splitwise-prefill":
        b, n = point.batch, point.tokens / max(point.batch, 1.0)
        cost = costs.cost_of(point.tokens, 0, b * n * n / 2, point.tokens, int(b), f)
        return Prediction(cost.duration_s, 0.0, 0.0)
    b, ctx = point.batch, point.context
    if point.source == "splitwise-decode":
        cost = costs.cost_of(0, int(b), b * ctx, b * ctx, int(b), f)
        return Prediction(cost.duration_s, 0.0, 0.0)
    if point.source == "splitwise-power":
        n = point.tokens / b
        pre = costs.cost_of(point.tokens, 0, b * n * n / 2, point.tokens, int(b), f)
        dec = costs.cost_of(0, int(b), b * ctx, b * ctx, int(b), f)
        steps = point.output_len
        energy = pre.power_w_per_gpu * pre.duration_s + dec.power_w_per_gpu * dec.duration_s * steps
        duration = pre.duration_s + dec.duration_s * steps
        return Prediction(duration, energy / duration * tp, 0.0)
    # ML.ENERGY steady state: median ITL is a decode iteration; power and J/token average
    # over iterations that also carry the prefill of replacement requests (chunked).
    ctx = mean_prompt_tokens + point.output_len / 2
    decode = costs.cost_of(0, round(b), b * ctx, b * ctx, round(b), f)
    prefill = b * mean_prompt_tokens / point.output_len
    mixed = costs.cost_of(round(prefill), round(b),
                          b * ctx + prefill * mean_prompt_tokens / 2, b * ctx + prefill,
                          round(b), f)  # fmt: skip
    power = mixed.power_w_per_gpu * tp
    return Prediction(decode.duration_s, power, power * mixed.duration_s / b)


def mape(predicted: list[float], measured: list[float]) -> float:
    """Mean absolute percentage error, in percent."""
    return (
        100.0
        * sum(abs(p - m) / m for p, m in zip(predicted, measured, strict=True))
        / max(len(measured), 1)
    )
