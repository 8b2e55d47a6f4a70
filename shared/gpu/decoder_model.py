"""A Llama-shaped decoder in PyTorch, for :mod:`shared.gpu.decoder_probe` to time on a GPU.

Random bf16 weights with the exact shapes of a model the simulated engine knows: timing and
power depend on shapes, not on the values. Forward passes only (prefill of one sequence,
decode of a batch against a static KV cache). PyTorch is imported by the caller
(:func:`import_torch`) and passed in, so importing this module never needs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["LLAMA_3_8B", "TINY", "Decoder", "DecoderShape", "import_torch"]


@dataclass(frozen=True, slots=True)
class DecoderShape:
    """Shapes of a Llama-family decoder (names as in ``shared.engine.hardware.ModelShape``)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int

    @property
    def head_dim(self) -> int:
        """Per-head width."""
        return self.hidden // self.heads


LLAMA_3_8B = DecoderShape("llama-3-8b", 32, 4096, 32, 8, 14336, 128256)
TINY = DecoderShape("tiny", 2, 256, 4, 2, 512, 1024)


def import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise SystemExit(
            "the decoder probe needs PyTorch (a CUDA build for GPU measurements); "
            "it is not a GreenServe dependency: run it where torch is installed"
        ) from exc
    return torch


LAYER_WEIGHTS = ("norm1", "wqkv", "wo", "norm2", "w_gate_up", "w_down")
"""A layer's tensors, in the order the layer functions take them."""


class Decoder:
    """A Llama-shaped decoder with random bf16 weights; forward passes only.

    With ``compiled=True`` each layer's body goes through ``torch.compile`` (Inductor fuses
    the norms, RoPE and SiLU into a few kernels, as vLLM's fused kernels do); the eager
    variant launches ≈ 20 small kernels per layer, whose gaps cost decode time and power.
    """

    def __init__(
        self, torch: Any, shape: DecoderShape, device: str, dtype: Any, *, compiled: bool = False
    ) -> None:
        self.t = torch
        self.shape = shape
        self.device = device
        self.dtype = dtype
        s = shape
        gen = torch.Generator(device=device).manual_seed(0)

        def weight(rows: int, cols: int) -> Any:
            w = torch.empty(rows, cols, device=device, dtype=dtype)
            # Scaled like a trained layer's weights so activations stay finite over 32 layers.
            w.normal_(0.0, 1.0 / math.sqrt(rows), generator=gen)
            return w

        qkv_cols = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.layers = [
            {
                "norm1": torch.ones(s.hidden, device=device, dtype=dtype),
                "wqkv": weight(s.hidden, qkv_cols),
                "wo": weight(s.heads * s.head_dim, s.hidden),
                "norm2": torch.ones(s.hidden, device=device, dtype=dtype),
                "w_gate_up": weight(s.hidden, 2 * s.ffn),
                "w_down": weight(s.ffn, s.hidden),
            }
            for _ in range(s.layers)
        ]
        self.embed = weight(s.vocab, s.hidden)
        self.final_norm = torch.ones(s.hidden, device=device, dtype=dtype)
        self.lm_head = weight(s.hidden, s.vocab)
        inv = 1.0 / (500000.0 ** (torch.arange(0, s.head_dim, 2, device=device) / s.head_dim))
        self.inv_freq = inv.float()
        self._prefill_layer: Callable[..., Any] = self._prefill_layer_eager
        self._decode_layer: Callable[..., Any] = self._decode_layer_eager
        if compiled:
            dynamo = torch._dynamo.config
            # One specialisation per measured shape; the default limit (8) would silently
            # fall back to eager after the eighth.
            for name in ("cache_size_limit", "recompile_limit"):
                if hasattr(dynamo, name):
                    setattr(dynamo, name, 256)
            self._prefill_layer = torch.compile(self._prefill_layer_eager, dynamic=False)
            self._decode_layer = torch.compile(self._decode_layer_eager, dynamic=False)

    def _norm(self, x: Any, w: Any) -> Any:
        t = self.t
        xf = x.float()
        xf = xf * t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        return xf.to(self.dtype) * w

    def _rope(self, x: Any, positions: Any) -> Any:
        # x: (batch, heads, tokens, head_dim); positions: (tokens,) or (batch, 1)
        t = self.t
        freqs = positions.float().unsqueeze(-1) * self.inv_freq
        # (tokens, d/2) is shared by the batch; (batch, 1, d/2) is one position per sequence.
        freqs = freqs.unsqueeze(0).unsqueeze(0) if freqs.dim() == 2 else freqs.unsqueeze(1)
        cos, sin = freqs.cos().to(self.dtype), freqs.sin().to(self.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return t.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    def _mlp(self, x: Any, w_gate_up: Any, w_down: Any) -> Any:
        f = self.t.nn.functional
        gate, up = (x @ w_gate_up).chunk(2, dim=-1)
        return (f.silu(gate) * up) @ w_down

    def _qkv(
        self, x: Any, positions: Any, norm1: Any, wqkv: Any, rows: int, tokens: int
    ) -> tuple[Any, Any, Any]:
        """Queries (with RoPE), keys (with RoPE) and values as (rows, heads, tokens, head_dim)."""
        s = self.shape
        q, k, v = (self._norm(x, norm1) @ wqkv).split(
            [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1
        )
        q = self._rope(q.view(rows, tokens, s.heads, s.head_dim).transpose(1, 2), positions)
        k = self._rope(k.view(rows, tokens, s.kv_heads, s.head_dim).transpose(1, 2), positions)
        return q, k, v.view(rows, tokens, s.kv_heads, s.head_dim).transpose(1, 2)

    def _prefill_layer_eager(
        self, x: Any, positions: Any, norm1: Any, wqkv: Any, wo: Any, norm2: Any, wgu: Any, wd: Any
    ) -> Any:
        s = self.shape
        f = self.t.nn.functional
        n = x.shape[1]
        group = s.heads // s.kv_heads
        q, k, v = self._qkv(x, positions, norm1, wqkv, 1, n)
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        a = f.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(1, n, s.hidden) @ wo
        return x + self._mlp(self._norm(x, norm2), wgu, wd)

    def prefill(self, ids: Any) -> Any:
        """One sequence's prompt (``ids``: (tokens,)); returns the last token's logits."""
        positions = self.t.arange(ids.shape[0], device=self.device)
        x = self.embed[ids].unsqueeze(0)  # (1, n, hidden)
        for layer in self.layers:
            x = self._prefill_layer(x, positions, *(layer[name] for name in LAYER_WEIGHTS))
        last = self._norm(x[:, -1, :], self.final_norm)
        return last @ self.lm_head

    def _decode_layer_eager(
        self,
        x: Any,
        positions: Any,
        k_cache: Any,
        v_cache: Any,
        pos: int,
        context: int,
        norm1: Any,
        wqkv: Any,
        wo: Any,
        norm2: Any,
        wgu: Any,
        wd: Any,
    ) -> Any:
        s = self.shape
        f = self.t.nn.functional
        b = x.shape[0]
        group = s.heads // s.kv_heads
        q, k, v = self._qkv(x, positions, norm1, wqkv, b, 1)
        k_cache[:, :, pos : pos + 1, :] = k
        v_cache[:, :, pos : pos + 1, :] = v
        # GQA without copying the cache: the `group` query heads of one KV head become
        # `group` query rows against that head's keys (no mask: every cached token is
        # visible to the newest one).
        qg = q.reshape(b, s.kv_heads, group, s.head_dim)
        a = f.scaled_dot_product_attention(
            qg, k_cache[:, :, :context, :], v_cache[:, :, :context, :]
        )
        x = x + a.reshape(b, 1, s.hidden) @ wo
        return x + self._mlp(self._norm(x, norm2), wgu, wd)

    def decode(self, ids: Any, caches: list[tuple[Any, Any]], context: int) -> Any:
        """One token for each of ``ids.shape[0]`` sequences with ``context`` cached tokens.

        The new token's key and value are written at position ``context - 1`` of the static
        cache and attention reads positions ``[0, context)``: the cost of a step at that
        context, repeatable without growing the cache.
        """
        b = ids.shape[0]
        pos = context - 1
        positions = self.t.full((b, 1), pos, device=self.device)
        x = self.embed[ids].unsqueeze(1)  # (b, 1, hidden)
        for layer, (k_cache, v_cache) in zip(self.layers, caches, strict=True):
            x = self._decode_layer(
                x,
                positions,
                k_cache,
                v_cache,
                pos,
                context,
                *(layer[name] for name in LAYER_WEIGHTS),
            )
        out = self._norm(x[:, 0, :], self.final_norm)
        return out @ self.lm_head

    def new_caches(self, batch: int, context: int) -> list[tuple[Any, Any]]:
        s = self.shape
        size = (batch, s.kv_heads, context, s.head_dim)
        return [
            (
                self.t.randn(size, device=self.device, dtype=self.dtype),
                self.t.randn(size, device=self.device, dtype=self.dtype),
            )
            for _ in range(s.layers)
        ]
