"""GPU types and model shapes the simulated engine knows.

Numbers are vendor datasheet values (dense bf16 tensor throughput, HBM bandwidth, board
power) and the published Hugging Face configurations of each model. Supported clocks follow
NVML's graphics-clock list: 15 MHz steps from 210 MHz to the GPU's maximum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

__all__ = [
    "GPUS",
    "MODELS",
    "GpuSpec",
    "ModelShape",
    "gpu_spec",
    "kv_block_budget",
    "model_shape",
]

_GIB: Final = 1024**3


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU type as the latency and power models see it."""

    name: str
    memory_bytes: int
    peak_bf16_flops: float
    """Dense bf16 tensor-core throughput at the maximum SM clock (FLOP/s)."""
    hbm_bytes_per_s: float
    tdp_w: float
    idle_w: float
    """Power of an idle GPU with the model loaded (splitwise power_model_constant.yaml)."""
    min_clock_mhz: float = 210.0
    max_clock_mhz: float
    clock_step_mhz: float = 15.0

    @property
    def supported_clocks_mhz(self) -> tuple[float, ...]:
        """Supported SM clocks, ascending, as NVML lists them."""
        steps = round((self.max_clock_mhz - self.min_clock_mhz) / self.clock_step_mhz)
        return tuple(self.min_clock_mhz + i * self.clock_step_mhz for i in range(steps + 1))

    def snap_clock(self, mhz: float) -> float:
        """Return the supported clock nearest to ``mhz`` (clamped to the range)."""
        clamped = min(max(mhz, self.min_clock_mhz), self.max_clock_mhz)
        steps = round((clamped - self.min_clock_mhz) / self.clock_step_mhz)
        return self.min_clock_mhz + steps * self.clock_step_mhz


GPUS: Final[dict[str, GpuSpec]] = {
    "A100-80GB": GpuSpec(
        name="A100-80GB",
        memory_bytes=80 * _GIB,
        peak_bf16_flops=312e12,
        hbm_bytes_per_s=2.039e12,
        tdp_w=400.0,
        idle_w=63.0,
        max_clock_mhz=1410.0,
    ),
    "H100-80GB": GpuSpec(
        name="H100-80GB",
        memory_bytes=80 * _GIB,
        peak_bf16_flops=989e12,
        hbm_bytes_per_s=3.35e12,
        tdp_w=700.0,
        idle_w=75.0,
        max_clock_mhz=1980.0,
    ),
}
"""Supported GPU types by name (SXM parts, as in DGX A100/H100)."""

_GPU_ALIASES: Final = {"a100": "A100-80GB", "a100-80gb": "A100-80GB", "h100": "H100-80GB"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelShape:
    """A dense decoder-only transformer (Llama family layout, gated MLP)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_context: int
    bytes_per_param: int = 2

    @property
    def params_per_layer(self) -> int:
        """Weights of one transformer block (attention projections and gated MLP)."""
        q_and_o = 2 * self.hidden * self.heads * self.head_dim
        k_and_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_and_o + k_and_v + 3 * self.hidden * self.intermediate

    @property
    def params(self) -> int:
        """All weights, untied input embedding and output head included."""
        return self.layers * self.params_per_layer + 2 * self.vocab * self.hidden

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights."""
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies over all layers (keys and values)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_param


def _llama(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    ffn: int,
    vocab: int,
    ctx: int,
    head_dim: int | None = None,
) -> ModelShape:
    return ModelShape(
        name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv,
        head_dim=head_dim or hidden // heads, intermediate=ffn, vocab=vocab, max_context=ctx,
    )  # fmt: skip


MODELS: Final[dict[str, ModelShape]] = {
    m.name: m
    for m in (
        _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
        _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
        _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
        _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
        _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
        _llama("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, 40960, head_dim=128),
        _llama("qwen3-32b", 64, 5120, 64, 8, 25600, 151936, 40960, head_dim=128),
    )
}
"""Supported model shapes by name."""


def gpu_spec(name: str) -> GpuSpec:
    """Return the GPU type called ``name`` (case-insensitive aliases such as ``a100``).

    Raises:
        ValueError: for an unknown GPU type.
    """
    key = _GPU_ALIASES.get(name.lower(), name)
    for gpu_name, spec in GPUS.items():
        if gpu_name.lower() == key.lower():
            return spec
    raise ValueError(f"unknown GPU type {name!r}; supported: {', '.join(GPUS)}")


def model_shape(name: str) -> ModelShape:
    """Return the model shape called ``name`` (case-insensitive, ``_`` or ``-``).

    Raises:
        ValueError: for an unknown model.
    """
    key = name.lower().replace("_", "-").removeprefix("meta-llama/").removesuffix("-hf")
    key = key.removeprefix("meta-").removesuffix("-instruct")
    if key in MODELS:
        return MODELS[key]
    raise ValueError(f"unknown model {name!r}; supported: {', '.join(MODELS)}")


def kv_block_budget(
    gpu: GpuSpec,
    model: ModelShape,
    *,
    tp: int,
    block_size: int,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
) -> int:
    """Return how many KV-cache blocks fit, as vLLM's memory profiling would find.

    Per GPU: ``memory × utilisation − weights / TP − activation reserve``, divided by the
    bytes of one block on one GPU (KV heads are sharded over TP, replicated below one per GPU).
    The reserve covers CUDA graphs and the non-torch context (~1.5 GiB) plus the peak
    activations of one full token budget.

    Raises:
        ValueError: when the weights alone do not fit.
    """
    usable = gpu.memory_bytes * gpu_memory_utilization
    activations = max_num_batched_tokens * (4 * model.hidden + 2 * model.intermediate // tp) * 2
    reserve = 1.5 * _GIB + activations
    free = usable - model.weight_bytes / tp - reserve
    kv_heads_per_gpu = max(1, model.kv_heads // tp)
    block_bytes = 2 * model.layers * kv_heads_per_gpu * model.head_dim * 2 * block_size
    blocks = math.floor(free / block_bytes) if free > 0 else 0
    if blocks < 1:
        raise ValueError(
            f"{model.name} with TP={tp} does not fit on {gpu.name}: "
            f"{model.weight_bytes / tp / _GIB:.1f} GiB of weights per GPU"
        )
    return blocks
