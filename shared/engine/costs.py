"""Per-iteration latency and power of one engine instance (roofline-style closed form).

Latency of an iteration on each GPU of a TP group (all GPUs run in lock step), with
``s = f / f_max`` and ``slow(s) = max(1, knee / s)`` (see :mod:`shared.engine.clock`):

``t = roofline(t_c / s, t_m · slow(s)) + L·(k_layer / s + h_layer) + T·(L·k_tok·slow(s) + h_tok)
+ h_iter + 2L·(α + a_extra + T·hidden·2 / β)``, with ``slow`` the soft memory knee of
:meth:`~shared.engine.clock.ClockSettings.memory_slowdown`

- ``t_c``: FLOPs of the linear layers (``2·params/TP`` per token, LM head for sampled
  tokens only) plus attention (``4·L·H·d_head/TP`` per query–key pair), over achieved
  FLOP/s; ``t_m``: bytes of the weights (read once per iteration) and of the KV cache read,
  over achieved HBM bandwidth; ``roofline`` is the soft maximum ``(a^p + b^p)^(1/p)``.
- ``k_layer``, ``k_tok``: GPU time of the small and element-wise kernels (fitted on Vidur).
- ``h_layer``, ``h_tok``, ``h_iter``, ``a_extra``: host-side overheads of the serving stack.
- ``α``, ``β``: NCCL all-reduce latency and bandwidth (fitted on Vidur's tables).

Power per GPU: ``P = P_idle + A·u_k + d(s)·(P_busy + P_c·u_c) + P_m·u_m·(b + (1 − b)·d(s))``,
capped at TDP, with ``d(s) = s·V(s)²`` (``ClockSettings.dynamic_power_factor``), ``u_c``,
``u_m`` the shares of the iteration spent at the achieved compute and bandwidth rates, and
``u_k`` the share in which kernels run (everything but the host terms ``h_*``); ``A`` is
the clock-independent active power (``ClockSettings.active_power_tdp_fraction`` × TDP).
Splitwise's phase powers (prompt near TDP, token lower) motivate the split.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.engine.clock import DEFAULT_CLOCK_SETTINGS, ClockSettings
from shared.engine.coefficients import GpuCoefficients
from shared.engine.hardware import GpuSpec, ModelShape

__all__ = ["CostModel", "DecodePricing", "IterationCost", "roofline"]

_ClockTerms = tuple[float, float, float, float, float, float, float]
"""The clock-only terms of :meth:`CostModel.cost_of` (see :meth:`CostModel._terms_at`)."""


def roofline(compute_s: float, memory_s: float, sharpness: float) -> float:
    """Return the soft maximum of a compute-bound and a memory-bound time."""
    return float((compute_s**sharpness + memory_s**sharpness) ** (1.0 / sharpness))


@dataclass(frozen=True, slots=True)
class IterationCost:
    """Duration and per-GPU power of one iteration."""

    duration_s: float
    power_w_per_gpu: float
    compute_s: float
    """Compute-bound time at the current clock (the clock-bound part)."""
    memory_s: float
    """Memory-bound time at the current clock."""


@dataclass(frozen=True, slots=True)
class DecodePricing:
    """The terms of :meth:`CostModel.cost_of` that stay fixed while the same ``n`` sequences
    decode at one clock, so a run of such iterations is priced with a few flops each.

    :meth:`CostModel.price_decode` applies them with the same float operations, in the same
    order, as ``cost_of(0, n, float(context), context, n, clock)``: results are bit-identical.
    """

    linear_flops: float
    """``lin·n + head·n`` (the first two terms of the FLOP sum)."""
    attention_flops_per_pair: float
    flop_rate: float
    s: float
    weight_bytes: float
    kv_bytes_per_token: float
    mem_rate: float
    slowdown: float
    sharpness: float
    kernel_layers_at_s: float
    token_time: float
    """``n · per-token time``."""
    token_kernel_time: float
    """``n · per-token GPU kernel time`` (the part of ``token_time`` the GPU is active)."""
    host_fixed_s: float
    allreduce_s: float
    """All-reduce time of the iteration, 0 at TP 1 (then not added, as in ``cost_of``)."""
    idle_w: float
    active_w: float
    dyn: float
    busy_w: float
    compute_w: float
    memory_w: float
    mem_power_share: float
    tdp_w: float


class CostModel:
    """Latency and power of one (GPU, model, TP) instance at any clock."""

    __slots__ = (
        "_active_w",
        "_ar_bytes_per_token",
        "_ar_fixed_s",
        "_ar_rate",
        "_attn_flops_per_pair",
        "_clock",
        "_clock_terms",
        "_coeff",
        "_decode_pricings",
        "_flop_rate",
        "_gpu",
        "_head_flops_per_seq",
        "_host_fixed_s",
        "_kernel_layers_s",
        "_kernel_token_s",
        "_kv_bytes_per_token",
        "_lin_flops_per_token",
        "_mem_power_floor",
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
        self._coeff = c = coefficients
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
        self._flop_rate = gpu.peak_bf16_flops * c.compute_efficiency
        self._mem_rate = gpu.hbm_bytes_per_s * c.memory_efficiency
        self._p = c.roofline_sharpness
        self._kernel_layers_s = model.layers * c.kernel_layer_s
        self._kernel_token_s = model.layers * c.kernel_token_layer_s
        self._host_fixed_s = model.layers * c.layer_overhead_s + c.iteration_overhead_s
        self._clock = clock
        self._mem_power_floor = clock.memory_power_clock_independent_share
        self._active_w = clock.active_power_tdp_fraction * gpu.tdp_w
        # Terms that depend only on the clock, computed once per clock with the very same
        # float operations as before (results are bit-identical, see _terms_at).
        self._clock_terms: dict[float, _ClockTerms] = {}
        self._decode_pricings: dict[tuple[int, float], DecodePricing] = {}
        if tp > 1:
            key = str(tp)
            per_call = c.allreduce_latency_s[key] + c.allreduce_extra_latency_s
            self._ar_fixed_s = 2.0 * model.layers * per_call
            self._ar_rate = c.allreduce_bytes_per_s[key]
            self._ar_bytes_per_token = 2.0 * model.layers * model.hidden * 2.0
        else:
            self._ar_fixed_s = 0.0
            self._ar_rate = 1.0
            self._ar_bytes_per_token = 0.0

    @property
    def idle_power_w_per_gpu(self) -> float:
        """Power of one idle GPU of the instance."""
        return self._coeff.idle_w

    def cost_of(
        self,
        prefill_tokens: int,
        decode_seqs: int,
        attention_pairs: float,
        kv_read_tokens: float,
        sampled_seqs: int,
        clock_mhz: float,
    ) -> IterationCost:
        """Return the duration and per-GPU power of one iteration.

        Args:
            prefill_tokens: prompt (or recomputed) tokens processed.
            decode_seqs: sequences decoding one token.
            attention_pairs: query–key pairs attended (decode: context length; a prefill
                chunk of ``n`` tokens at offset ``c``: ``n·(c + n/2)``).
            kv_read_tokens: context tokens whose keys and values are read from HBM.
            sampled_seqs: sequences whose logits are computed.
            clock_mhz: SM clock.
        """
        tokens = prefill_tokens + decode_seqs
        terms = self._clock_terms.get(clock_mhz)
        if terms is None:
            terms = self._terms_at(clock_mhz)
        s, slowdown, kernel_layers_at_s, per_token_s, kernel_token_s, dyn, mem_power_share = terms
        flops = (
            self._lin_flops_per_token * tokens
            + self._head_flops_per_seq * sampled_seqs
            + self._attn_flops_per_pair * attention_pairs
        )
        compute_s = flops / self._flop_rate / s
        memory_full = (self._weight_bytes + self._kv_bytes_per_token * kv_read_tokens) / (
            self._mem_rate
        )
        memory_s = memory_full * slowdown
        p = self._p
        c = self._coeff
        kernels_s = (compute_s**p + memory_s**p) ** (1.0 / p) + kernel_layers_at_s
        duration = kernels_s + tokens * per_token_s + self._host_fixed_s
        kernels_s += tokens * kernel_token_s
        if self._ar_fixed_s:
            allreduce_s = self._ar_fixed_s + self._ar_bytes_per_token * tokens / self._ar_rate
            duration += allreduce_s
            kernels_s += allreduce_s
        # Utilisations are shares of the iteration at the achieved rates; a fully
        # compute-bound prefill draws busy + compute power, an idle-ish decode little more
        # than busy power. The clock-independent active power is paid while kernels run
        # (not in the host's gaps), so a slower clock pays it for longer.
        u_c = compute_s / duration
        u_m = memory_full / duration
        power = (
            c.idle_w
            + self._active_w * (kernels_s / duration)
            + dyn * (c.busy_w + c.compute_w * u_c)
            + c.memory_w * u_m * mem_power_share
        )
        # Boards are power-capped at TDP; the firmware holds the cap by shaving clocks,
        # which this model folds into the fitted efficiencies.
        power = min(power, self._gpu.tdp_w)
        return IterationCost(duration, power, compute_s, memory_s)

    def decode_pricing(self, sequences: int, clock_mhz: float) -> DecodePricing:
        """Return the fixed terms of pure-decode iterations of ``sequences`` at ``clock_mhz``."""
        cached = self._decode_pricings.get((sequences, clock_mhz))
        if cached is not None:
            return cached
        terms = self._clock_terms.get(clock_mhz) or self._terms_at(clock_mhz)
        s, slowdown, kernel_layers_at_s, per_token_s, kernel_token_s, dyn, mem_power_share = terms
        c = self._coeff
        allreduce = 0.0
        if self._ar_fixed_s:
            allreduce = self._ar_fixed_s + self._ar_bytes_per_token * sequences / self._ar_rate
        pricing = DecodePricing(
            linear_flops=self._lin_flops_per_token * sequences
            + self._head_flops_per_seq * sequences,
            attention_flops_per_pair=self._attn_flops_per_pair,
            flop_rate=self._flop_rate,
            s=s,
            weight_bytes=self._weight_bytes,
            kv_bytes_per_token=self._kv_bytes_per_token,
            mem_rate=self._mem_rate,
            slowdown=slowdown,
            sharpness=self._p,
            kernel_layers_at_s=kernel_layers_at_s,
            token_time=sequences * per_token_s,
            token_kernel_time=sequences * kernel_token_s,
            host_fixed_s=self._host_fixed_s,
            allreduce_s=allreduce,
            idle_w=c.idle_w,
            active_w=self._active_w,
            dyn=dyn,
            busy_w=c.busy_w,
            compute_w=c.compute_w,
            memory_w=c.memory_w,
            mem_power_share=mem_power_share,
            tdp_w=self._gpu.tdp_w,
        )
        if len(self._decode_pricings) < 65536:  # batch sizes × clocks in use: small
            self._decode_pricings[(sequences, clock_mhz)] = pricing
        return pricing

    def _terms_at(self, clock_mhz: float) -> _ClockTerms:
        """Return and cache the clock-only terms of :meth:`cost_of`.

        They are s, the memory slowdown, the kernel time per iteration, the time per token
        (GPU and host) and its GPU part, the dynamic-power factor ``d(s)`` and the clock
        factor of memory-bound power.
        """
        s = clock_mhz / self._gpu.max_clock_mhz
        slowdown = self._clock.memory_slowdown(s)
        floor = self._mem_power_floor
        dyn = self._clock.dynamic_power_factor(s)
        terms = (
            s,
            slowdown,
            self._kernel_layers_s / s,
            self._kernel_token_s * slowdown + self._coeff.token_overhead_s,
            self._kernel_token_s * slowdown,
            dyn,
            floor + (1.0 - floor) * dyn,
        )
        if len(self._clock_terms) < 4096:  # bounded: a clock sweep touches < 200 steps
            self._clock_terms[clock_mhz] = terms
        return terms
