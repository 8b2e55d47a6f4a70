"""Fitted coefficients of the latency and power models, and their versioned file.

``tools/fit_engine.py`` writes ``shared/engine/coefficients_v1.json`` from the calibration
data; :func:`load_coefficients` reads it. The file is plain JSON so the engine needs
neither scikit-learn nor scipy at run time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

__all__ = [
    "COEFFICIENTS_PATH",
    "COEFFICIENTS_VERSION",
    "STACKS",
    "Coefficients",
    "GpuCoefficients",
    "coefficients_from_dict",
    "coefficients_to_dict",
    "default_coefficients",
    "for_stack",
    "load_coefficients",
]

COEFFICIENTS_VERSION: Final = 1
"""Schema version of the coefficient file; bump when a field changes meaning."""

STACKS: Final = ("vllm", "splitwise")
"""Serving stacks with fitted overheads: ``vllm`` (ML.ENERGY, vLLM v1, the engine's
default) and ``splitwise`` (the Splitwise paper's measurements)."""

COEFFICIENTS_PATH: Final = Path(__file__).with_name(f"coefficients_v{COEFFICIENTS_VERSION}.json")
"""The coefficient file shipped with the package."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuCoefficients:
    """Latency and power coefficients of one GPU type (see ``docs/engine.md``)."""

    compute_efficiency: float = 0.55
    """Achieved share of peak dense bf16 FLOP/s in GEMMs and attention."""
    memory_efficiency: float = 0.75
    """Achieved share of peak HBM bandwidth when streaming weights and KV."""
    roofline_sharpness: float = 3.0
    """p in ``(t_compute^p + t_memory^p)^(1/p)``: a soft maximum, since kernels are
    neither purely compute- nor purely memory-bound near the ridge point."""
    kernel_layer_s: float = 10e-6
    """Fixed GPU time per layer per iteration (small kernels: norms, RoPE, adds); scales
    with 1/clock. Fitted on Vidur's per-operator times."""
    kernel_token_layer_s: float = 5e-9
    """GPU time per token per layer of the element-wise kernels (memory-bound)."""
    layer_overhead_s: float = 5e-6
    """Host-side cost per layer per iteration of the serving stack (launches not hidden by
    CUDA graphs); does not scale with the GPU clock."""
    iteration_overhead_s: float = 2e-3
    """Fixed host cost per iteration (scheduling, sampling, input preparation)."""
    token_overhead_s: float = 0.0
    """Host cost per scheduled token (input preparation, detokenisation)."""
    allreduce_extra_latency_s: float = 0.0
    """Extra latency per all-reduce that the serving stack adds to NCCL's own."""
    allreduce_latency_s: dict[str, float] = field(default_factory=dict)
    """Latency of one all-reduce by TP degree (``"2"``, ``"4"``, ``"8"``)."""
    allreduce_bytes_per_s: dict[str, float] = field(default_factory=dict)
    """Bus bandwidth of one all-reduce by TP degree."""
    idle_w: float = 60.0
    """Power of an idle GPU holding a model (per GPU)."""
    busy_w: float = 40.0
    """Extra power whenever the GPU runs kernels, at maximum clock."""
    compute_w: float = 300.0
    """Extra power at full achieved tensor utilisation, at maximum clock."""
    memory_w: float = 150.0
    """Extra power at full achieved HBM bandwidth, at maximum clock."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Coefficients:
    """All fitted coefficients, by GPU type name."""

    version: int = COEFFICIENTS_VERSION
    gpus: dict[str, GpuCoefficients] = field(default_factory=dict)
    """Engine coefficients: hardware terms plus the overheads of a current vLLM stack."""
    stacks: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Overheads of each measured serving stack, ``stacks[stack][gpu][field]``: the
    calibration sources ran different software, so their host overheads are fitted
    separately while the hardware terms are shared."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """What the fit used (files, split, residuals); informative only."""


def default_coefficients() -> Coefficients:
    """Return uncalibrated, datasheet-plausible coefficients (used only without a file)."""
    return Coefficients(
        gpus={
            "A100-80GB": GpuCoefficients(
                idle_w=63.0,
                allreduce_latency_s={"2": 15e-6, "4": 20e-6, "8": 25e-6},
                allreduce_bytes_per_s={"2": 100e9, "4": 100e9, "8": 100e9},
            ),
            "H100-80GB": GpuCoefficients(
                idle_w=75.0,
                busy_w=60.0,
                compute_w=560.0,
                memory_w=250.0,
                allreduce_latency_s={"2": 12e-6, "4": 15e-6, "8": 20e-6},
                allreduce_bytes_per_s={"2": 200e9, "4": 200e9, "8": 200e9},
            ),
        }
    )


def coefficients_to_dict(coefficients: Coefficients) -> dict[str, Any]:
    """Return the JSON-ready form of ``coefficients``."""
    return asdict(coefficients)


def coefficients_from_dict(raw: dict[str, Any]) -> Coefficients:
    """Build coefficients from their JSON form.

    Raises:
        ValueError: when the schema version does not match this code.
    """
    version = int(raw.get("version", -1))
    if version != COEFFICIENTS_VERSION:
        raise ValueError(f"coefficient file version {version}, expected {COEFFICIENTS_VERSION}")
    gpus = {name: GpuCoefficients(**values) for name, values in raw["gpus"].items()}
    return Coefficients(
        version=version,
        gpus=gpus,
        stacks=dict(raw.get("stacks", {})),
        provenance=dict(raw.get("provenance", {})),
    )


def for_stack(coefficients: Coefficients, gpu: str, stack: str) -> GpuCoefficients:
    """Return ``gpu``'s coefficients with the overheads of serving ``stack``."""
    base = coefficients.gpus[gpu]
    overrides: dict[str, Any] = dict(coefficients.stacks.get(stack, {}).get(gpu, {}))
    return replace(base, **overrides)


@lru_cache(maxsize=4)
def _load_cached(path: Path) -> Coefficients:
    return coefficients_from_dict(json.loads(path.read_text(encoding="utf-8")))


def load_coefficients(path: Path | None = None) -> Coefficients:
    """Read a coefficient file (the packaged one by default).

    Falls back to :func:`default_coefficients` only when the packaged file is absent, so a
    fresh checkout works before ``tools/fit_engine.py`` has run.
    """
    target = path or COEFFICIENTS_PATH
    if path is None and not target.exists():
        return default_coefficients()
    return _load_cached(target.resolve())
