"""Per-iteration latency and power of one engine instance (roofline-style closed form).

Latency of an iteration on each GPU of a TP group (all GPUs run in lock step):

``t = ((t_c/s)^p + (t_m·slow(s))^p)^(1/p) + L·c_layer·(g/s + 1 − g) + c_iter + c_tok·T + t_ar``

- ``t_c``: FLOPs of the linear layers (``2·params/TP`` per token, LM head for sampled
  tokens only) plus attention (``4·L·H·d_head/TP`` per query–key pair), over achieved
  FLOP/s; ``s = f / f_max``.
- ``t_m``: bytes of the weights (read once per iteration) and of the KV cache read, over
  achieved HBM bandwidth; ``slow(s) = max(1, knee / s)`` (see :mod:`shared.engine.clock`).
- ``t_ar``: two all-reduces per layer of ``T·hidden`` bf16 values (Vidur's tables).

Power per GPU: ``P = P_idle + s^γ·(P_busy + P_c·u_c) + P_m·u_m·(β + (1 − β)·s^γ)``, with
``u_c`` and ``u_m`` the achieved compute and bandwidth utilisations over the iteration.
The form follows splitwise's phase power (prompt phase near TDP, token phase lower) and
the clock model's super-linear dynamic power.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.engine.clock import DEFAULT_CLOCK_SETTINGS, ClockSettings
from shared.engine.coefficients import GpuCoefficients
from shared.engine.hardware import GpuSpec, ModelShape

__all__ = ["CostModel", "IterationCost", "IterationWork"]


@dataclass(frozen=True, slots=True)
class IterationWork:
    """What one iteration computes, summed over its scheduled sequences."""

    prefill_tokens: int = 0
    decode_seqs: int = 0
    attention_pairs: float = 0.0
    """Query–key pairs attended (decode: the context length; prefill chunk ``n`` at
    offset ``c``: ``n·(c + n/2)``)."""
    kv_read_tokens: int = 0
    """Context tokens whose keys and values are read from HBM."""
    sampled_seqs: int = 0
    """Sequences whose logits are computed (those that emit a token)."""


@dataclass(frozen=True, slots=True)
class IterationCost:
    """Duration and per-GPU power of one iteration."""

    duration_s: float
    power_w_per_gpu: float
    compute_s: float
    memory_s: float


class CostModel:
    """Latency and power of one (GPU, model, TP) instance at any clock."""

    __slots__ = (
        "_ar_bytes_per_token",
        "_ar_latency",
        "_ar_rate",
        "_attn_flops_per_pair",
        "_beta",
        "_coeff",
        "_flop_rate",
        "_gamma",
        "_gpu",
        "_head_flops_per_seq",
        "_knee",
        "_kv_bytes_per_token",
        "_layer_cost_cpu",
        "_layer_cost_gpu",
        "_lin_flops_per_token",
        "_mem_rate",
        "_p",
        "_weight_bytes",
        "tp",
    )

    def __init__(
        self,
        gpu: GpuSpec,
        model: ModelShape,
        tp: int,
        coefficients: GpuCoefficients,
        clock: ClockSettings = DEFAULT_CLOCK_SETTINGS,
    ) -> None:
        """Precompute every per-instance constant so that one iteration costs a few flops."""
        self._gpu = gpu
        self._coeff = coefficients
        self.tp = tp
        layer_params = model.layers * model.params_per_layer
        head_params = model.vocab * model.hidden
        self._lin_flops_per_token = 2.0 * layer_params / tp
        self._head_flops_per_seq = 2.0 * head_params / tp
        self._attn_flops_per_pair = 4.0 * model.layers * model.heads * model.head_dim / tp
        self._weight_bytes = (layer_params + head_params) * model.bytes_per_param / tp
        kv_heads_per_gpu = max(1, model.kv_heads // tp)
        self._kv_bytes_per_token = (
            2.0 * model.layers * kv_heads_per_gpu * model.head_dim * model.bytes_per_param
        )
        self._flop_rate = gpu.peak_bf16_flops * coefficients.compute_efficiency
        self._mem_rate = gpu.hbm_bytes_per_s * coefficients.memory_efficiency
        self._p = coefficients.roofline_sharpness
        share = clock.gpu_overhead_clock_share
        self._layer_cost_gpu = model.layers * coefficients.layer_overhead_s * share
        self._layer_cost_cpu = model.layers * coefficients.layer_overhead_s * (1.0 - share)
        self._knee = clock.memory_knee_fraction
        self._gamma = clock.power_exponent
        self._beta = clock.memory_power_clock_independent_share
        key = str(tp)
        if tp > 1:
            self._ar_latency = 2.0 * model.layers * coefficients.allreduce_latency_s[key]
            self._ar_rate = coefficients.allreduce_bytes_per_s[key]
            self._ar_bytes_per_token = 2.0 * model.layers * model.hidden * 2.0
        else:
            self._ar_latency = 0.0
            self._ar_rate = 1.0
            self._ar_bytes_per_token = 0.0

    @property
    def idle_power_w_per_gpu(self) -> float:
        """Power of one idle GPU of the instance."""
        return self._coeff.idle_w

    def cost(self, work: IterationWork, clock_mhz: float) -> IterationCost:
        """Return the duration and per-GPU power of ``work`` at ``clock_mhz``."""
        return self.cost_of(
            work.prefill_tokens,
            work.decode_seqs,
            work.attention_pairs,
            work.kv_read_tokens,
            work.sampled_seqs,
            clock_mhz,
        )

    def cost_of(
        self,
        prefill_tokens: int,
        decode_seqs: int,
        attention_pairs: float,
        kv_read_tokens: int,
        sampled_seqs: int,
        clock_mhz: float,
    ) -> IterationCost:
        """Positional, allocation-light form of :meth:`cost` for the engine's inner loop."""
        tokens = prefill_tokens + decode_seqs
        s = clock_mhz / self._gpu.max_clock_mhz
        flops = (
            self._lin_flops_per_token * tokens
            + self._head_flops_per_seq * sampled_seqs
            + self._attn_flops_per_pair * attention_pairs
        )
        compute_full = flops / self._flop_rate
        memory_full = (self._weight_bytes + self._kv_bytes_per_token * kv_read_tokens) / (
            self._mem_rate
        )
        compute_s = compute_full / s
        memory_s = memory_full * (self._knee / s if s < self._knee else 1.0)
        p = self._p
        roofline = (compute_s**p + memory_s**p) ** (1.0 / p)
        coeff = self._coeff
        duration = (
            roofline
            + self._layer_cost_gpu / s
            + self._layer_cost_cpu
            + coeff.iteration_overhead_s
            + coeff.token_overhead_s * tokens
        )
        if self._ar_latency:
            duration += self._ar_latency + self._ar_bytes_per_token * tokens / self._ar_rate
        # Utilisations are shares of the iteration spent at the achieved rates; they sum
        # to at most ~1 so a fully compute-bound prefill draws busy + compute power.
        u_c = compute_s / duration
        u_m = memory_full / duration
        dyn = s**self._gamma
        power = (
            coeff.idle_w
            + dyn * (coeff.busy_w + coeff.compute_w * u_c)
            + coeff.memory_w * u_m * (self._beta + (1.0 - self._beta) * dyn)
        )
        # Boards are power-capped at TDP; the firmware holds the cap by shaving clocks,
        # which this model folds into the fitted efficiencies.
        power = min(power, self._gpu.tdp_w)
        return IterationCost(duration, power, compute_s, memory_s)
