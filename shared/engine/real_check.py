"""Compare the engine model with iterations measured on a real GPU.

Input: the JSON of :mod:`shared.gpu.decoder_probe` (prefill and decode iterations of a
Llama-shaped decoder, timed under CUDA graphs, with NVML energy and the SM clock seen).
Each point is priced with :meth:`shared.engine.costs.CostModel.cost_of` at the GPU's maximum
clock, in the engine's own conventions:

* prefill of ``n`` tokens: ``cost_of(n, 0, n²/2, n, 1, f)`` (as ``shared.engine.calibration``);
* decode of ``b`` sequences at context ``c``: ``cost_of(0, b, b·c, b·c, b, f)``.

Two predictions per point: the engine as shipped (vLLM stack overheads: host time per
iteration, per layer and per token that vLLM's scheduler and sampler add), and the same
hardware terms with the host overheads set to zero, which is what the probe runs (a CUDA
graph replay and no scheduler). The second isolates the hardware half of the model (achieved
FLOP/s and bandwidth, kernel times, power), the first shows what a vLLM deployment of the
same model would add. Power is per GPU; the probe's board power includes the GPU's idle
draw, as the engine's does.

Why the maximum clock and not the clock the probe saw: the probe sets no clock, so the GPU
runs at its default application clock (the maximum) and the firmware lowers it only to hold
the board's power cap. The engine's ``clock_mhz`` argument is the *locked* clock, and its
fitted efficiencies already fold in that cap-holding ("Boards are power-capped at TDP",
``costs.py``); pricing at the observed, cap-lowered clock would count the cap twice (lower
power *and* slower kernels than the model's own cap). The observed clock is reported beside
each point, so the reader sees where the cap acted.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shared.engine.api import EngineConfig
from shared.engine.coefficients import Coefficients, load_coefficients
from shared.engine.costs import CostModel
from shared.engine.hardware import gpu_spec, model_shape
from shared.engine.simulated import create_engine

__all__ = [
    "MEASUREMENTS_DIR",
    "PointComparison",
    "compare_measurement",
    "load_measurement",
    "summarise",
]

MEASUREMENTS_DIR = Path(__file__).resolve().parent.parent / "gpu" / "measurements"
"""Probe runs shipped with the package (our own measurements, not third-party data)."""

_PROBE_VERSION = 1
_GPU_BY_NAME = {"H100 80GB": "H100-80GB", "H100": "H100-80GB", "A100": "A100-80GB"}


@dataclass(frozen=True, slots=True)
class PointComparison:
    """One measured iteration beside the model's two predictions."""

    kind: str
    batch: int
    tokens: int
    clock_mhz: float
    """The clock priced (the maximum: see the module docstring)."""
    observed_clock_mhz: float | None
    """Mean SM clock NVML reported during the window (below the maximum under the cap)."""
    measured_s: float
    predicted_s: float
    """Engine as shipped (vLLM overheads)."""
    predicted_gpu_s: float
    """Hardware terms only (host overheads zero): what the probe runs."""
    measured_w: float | None
    predicted_w: float
    predicted_gpu_w: float
    measured_j: float | None
    predicted_gpu_j: float

    @property
    def time_error_pct(self) -> float:
        """Signed error of the hardware-only prediction, % of the measurement."""
        return 100.0 * (self.predicted_gpu_s - self.measured_s) / self.measured_s

    @property
    def shipped_time_error_pct(self) -> float:
        """Signed error of the shipped (vLLM-overhead) prediction."""
        return 100.0 * (self.predicted_s - self.measured_s) / self.measured_s

    @property
    def power_error_pct(self) -> float | None:
        """Signed error of the hardware-only power prediction."""
        if self.measured_w is None:
            return None
        return 100.0 * (self.predicted_gpu_w - self.measured_w) / self.measured_w

    @property
    def energy_error_pct(self) -> float | None:
        """Signed error of energy per iteration (hardware-only)."""
        if self.measured_j is None:
            return None
        return 100.0 * (self.predicted_gpu_j - self.measured_j) / self.measured_j


def load_measurement(path: Path) -> dict[str, Any]:
    """Read a probe JSON.

    Raises:
        ValueError: for another probe version or a file without points.
    """
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if raw.get("version") != _PROBE_VERSION:
        raise ValueError(f"{path}: probe version {raw.get('version')}, expected {_PROBE_VERSION}")
    if not raw.get("points"):
        raise ValueError(f"{path}: no measured points")
    return raw


def engine_gpu_name(gpu_name: str | None) -> str:
    """Map NVML's device name to the engine's GPU type.

    Raises:
        ValueError: for a GPU the engine has no model of.
    """
    for needle, engine_name in _GPU_BY_NAME.items():
        if gpu_name and needle in gpu_name:
            return engine_name
    raise ValueError(f"the engine has no model of GPU {gpu_name!r}")


def _cost_models(gpu: str, model: str, coefficients: Coefficients) -> tuple[CostModel, CostModel]:
    shipped = create_engine(
        EngineConfig(gpu=gpu, model=model, tp=1), coefficients=coefficients
    ).cost_model
    base = coefficients.gpus[gpu]
    no_host = replace(
        base,
        layer_overhead_s=0.0,
        iteration_overhead_s=0.0,
        token_overhead_s=0.0,
        allreduce_extra_latency_s=0.0,
    )
    hardware_only = CostModel(gpu_spec(gpu), model_shape(model), 1, no_host)
    return shipped, hardware_only


def _check_shape(raw: dict[str, Any]) -> str:
    shape = raw["shape"]
    name = str(shape["name"])
    known = model_shape(name)
    mismatched = [
        field
        for field, ours in (
            ("layers", known.layers),
            ("hidden", known.hidden),
            ("heads", known.heads),
            ("kv_heads", known.kv_heads),
            ("vocab", known.vocab),
        )
        if int(shape[field]) != ours
    ]
    if mismatched:
        raise ValueError(f"probe shape differs from the engine's {name} in {mismatched}")
    return name


def compare_measurement(
    raw: dict[str, Any], coefficients: Coefficients | None = None
) -> list[PointComparison]:
    """Price every measured point with the engine model (see the module docstring)."""
    coefficients = coefficients or load_coefficients()
    gpu = engine_gpu_name(raw.get("gpu_name"))
    model = _check_shape(raw)
    shipped, hardware = _cost_models(gpu, model, coefficients)
    max_clock = gpu_spec(gpu).max_clock_mhz
    out: list[PointComparison] = []
    for point in raw["points"]:
        kind = str(point["kind"])
        b, n = int(point["batch"]), int(point["tokens"])
        clock = float(max_clock)
        observed = point.get("sm_clock_mhz")
        if kind == "prefill":
            args = (n, 0, b * n * n / 2, float(n), b, clock)
        elif kind == "decode":
            args = (0, b, float(b * n), float(b * n), b, clock)
        else:
            raise ValueError(f"unknown point kind {kind!r}")
        as_shipped = shipped.cost_of(*args)
        gpu_only = hardware.cost_of(*args)
        measured_j = point.get("energy_j_per_iteration")
        out.append(
            PointComparison(
                kind=kind,
                batch=b,
                tokens=n,
                clock_mhz=clock,
                observed_clock_mhz=None if observed is None else float(observed),
                measured_s=float(point["iteration_s"]),
                predicted_s=as_shipped.duration_s,
                predicted_gpu_s=gpu_only.duration_s,
                measured_w=None if point.get("power_w") is None else float(point["power_w"]),
                predicted_w=as_shipped.power_w_per_gpu,
                predicted_gpu_w=gpu_only.power_w_per_gpu,
                measured_j=None if measured_j is None else float(measured_j),
                predicted_gpu_j=gpu_only.duration_s * gpu_only.power_w_per_gpu,
            )
        )
    return out


def _stats(errors: list[float]) -> dict[str, float | int | None]:
    if not errors:
        return {"n": 0, "median_ape": None, "mean_signed_pct": None, "max_ape": None}
    return {
        "n": len(errors),
        "median_ape": round(statistics.median(abs(e) for e in errors), 2),
        "mean_signed_pct": round(statistics.fmean(errors), 2),
        "max_ape": round(max(abs(e) for e in errors), 2),
    }


def summarise(points: list[PointComparison]) -> dict[str, Any]:
    """Error statistics per kind and quantity (signed mean shows the bias's direction)."""
    summary: dict[str, Any] = {}
    for kind, label in (("prefill", "ttft"), ("decode", "tbt")):
        mine = [p for p in points if p.kind == kind]
        summary[f"{label}_hardware"] = _stats([p.time_error_pct for p in mine])
        summary[f"{label}_shipped"] = _stats([p.shipped_time_error_pct for p in mine])
        summary[f"{label}_power"] = _stats(
            [e for p in mine if (e := p.power_error_pct) is not None]
        )
        summary[f"{label}_energy"] = _stats(
            [e for p in mine if (e := p.energy_error_pct) is not None]
        )
    return summary
