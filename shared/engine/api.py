"""The contract between the simulated GPU engine and everything that drives it.

The worker shim (live stack), ``greenserve sim-engine`` (HTTP stand-in for vLLM), the
profiler and the offline cluster simulator all drive an engine through this interface, in
*engine time* (seconds on the simulated GPU's own clock, starting at 0). Callers map engine
time to wall time themselves (the worker divides by its speed-up factor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["Engine", "EngineConfig", "EngineRequest", "IterationResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """One engine instance: a model served with tensor parallelism on identical GPUs.

    Attributes mirror vLLM's engine arguments where one exists.
    """

    gpu: str = "A100-80GB"
    """GPU type name; see :mod:`shared.engine` for the supported list."""
    model: str = "llama-3-8b"
    """Model shape name; see :mod:`shared.engine` for the supported list."""
    tp: int = 1
    """Tensor-parallel degree (GPUs in the instance); 1, 2, 4 or 8."""
    max_num_seqs: int = 256
    """Most sequences running in one iteration (vLLM ``max_num_seqs``)."""
    max_num_batched_tokens: int = 8192
    """Token budget of one iteration, prefill chunks included (vLLM chunked prefill)."""
    block_size: int = 16
    """Tokens per KV-cache block (vLLM ``block_size``)."""
    gpu_memory_utilization: float = 0.9
    """Share of GPU memory the engine may use for weights, activations and KV cache."""
    clock_mhz: float | None = None
    """Initial SM clock; ``None`` means the GPU's maximum."""

    def __post_init__(self) -> None:
        if self.tp not in (1, 2, 4, 8):
            raise ValueError(f"tp must be 1, 2, 4 or 8, got {self.tp}")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1 or self.block_size < 1:
            raise ValueError("max_num_seqs, max_num_batched_tokens and block_size must be >= 1")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError("gpu_memory_utilization must be in (0, 1]")


@dataclass(slots=True, kw_only=True)
class EngineRequest:
    """A request as the engine sees it."""

    request_id: str
    prompt_tokens: int
    """Input length in tokens (>= 1)."""
    output_tokens: int
    """Tokens to generate (>= 1). The simulator knows the true length; a real engine stops
    at end-of-sequence or ``max_tokens``."""
    arrival_s: float = 0.0
    """Engine time at which the request was added."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IterationResult:
    """What one engine iteration did."""

    start_s: float
    duration_s: float
    prefill_tokens: int
    """Prompt tokens processed in this iteration (chunked prefill may split a prompt)."""
    decode_tokens: int
    """Sequences that produced a decode token in this iteration."""
    emitted: tuple[str, ...]
    """Request ids that produced one output token in this iteration (the first output token
    of a request is produced by the iteration that finishes its prefill)."""
    finished: tuple[str, ...]
    """Request ids that produced their last token in this iteration."""
    preempted: tuple[str, ...] = ()
    """Request ids evicted (recompute preemption) because the KV cache ran out."""
    energy_j: float = 0.0
    """Energy all GPUs of the instance used during the iteration."""
    power_w: float = 0.0
    """Average power of the instance (all GPUs) during the iteration."""
    clock_mhz: float = 0.0
    kv_blocks_used: int = 0
    extra: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """An iteration-level continuous-batching engine in engine time."""

    @property
    def config(self) -> EngineConfig: ...
    @property
    def now_s(self) -> float:
        """Current engine time."""
        ...

    @property
    def clock_mhz(self) -> float: ...
    @property
    def supported_clocks_mhz(self) -> tuple[float, ...]: ...
    @property
    def num_running(self) -> int: ...
    @property
    def num_waiting(self) -> int: ...
    @property
    def kv_blocks_total(self) -> int: ...
    @property
    def kv_blocks_used(self) -> int: ...
    @property
    def energy_j(self) -> float:
        """Cumulative energy of the instance since creation (like NVML's counter)."""
        ...

    @property
    def has_work(self) -> bool: ...

    def add(self, request: EngineRequest) -> None:
        """Queue a request; raises ValueError if it can never fit (prompt beyond KV budget)."""
        ...

    def abort(self, request_id: str) -> bool:
        """Drop a request; returns whether it was known."""
        ...

    def set_clock_mhz(self, mhz: float) -> float:
        """Set the SM clock, snapped to a supported step; returns the clock applied."""
        ...

    def step(self) -> IterationResult | None:
        """Run one iteration and advance engine time; ``None`` when there is no work."""
        ...

    def idle_until(self, t_s: float) -> float:
        """Advance engine time to ``t_s`` with no work, at idle power; returns energy used."""
        ...
