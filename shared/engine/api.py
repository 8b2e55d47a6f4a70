"""The contract between the simulated GPU engine and everything that drives it.

The worker shim (live stack), ``greenserve sim-engine`` (HTTP stand-in for vLLM), the
profiler and the offline cluster simulator all drive an engine through this interface, in
*engine time* (seconds on the simulated GPU's own clock, starting at 0). Callers map engine
time to wall time themselves (the worker divides by its speed-up factor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Protocol, runtime_checkable

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineRequest",
    "IterationResult",
    "IterationRun",
    "MultiStepEngine",
]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class IterationRun:
    """Consecutive iterations that :meth:`MultiStepEngine.step_many` ran at once.

    A run is either one iteration of any kind, or ``k >= 1`` *pure-decode* iterations of
    one unchanged set of sequences: every id in ``emitted`` produced exactly one token in
    each of the ``k`` iterations, nothing was prefilled, admitted or preempted, and only the
    last iteration may finish requests (``finished``). Per-iteration values are exact:
    :meth:`results` rebuilds, bit for bit, the :class:`IterationResult` objects that as
    many :meth:`Engine.step` calls would have returned.
    """

    start_s: float
    durations_s: tuple[float, ...]
    """Duration of each iteration; iteration ``i`` ends at ``ends_s[i]``."""
    energies_j: tuple[float, ...]
    """Energy of each iteration (all GPUs)."""
    powers_w: tuple[float, ...]
    """Average power of each iteration (all GPUs)."""
    kv_blocks_used: tuple[int, ...]
    """KV blocks in use after each iteration."""
    prefill_tokens: int
    """Prompt tokens of each iteration (0 in a run of several iterations)."""
    decode_tokens: int
    """Decoding sequences of each iteration (the same in every iteration of the run)."""
    emitted: tuple[str, ...]
    """Ids that produced one token in *each* iteration of the run."""
    finished: tuple[str, ...]
    """Ids that produced their last token in the run's last iteration."""
    preempted: tuple[str, ...] = ()
    """Ids preempted (only ever in a run of one iteration)."""
    clock_mhz: float = 0.0

    @property
    def iterations(self) -> int:
        """Number of iterations in the run."""
        return len(self.durations_s)

    @property
    def ends_s(self) -> tuple[float, ...]:
        """End time of each iteration, summed in order as the engine's own clock is."""
        return tuple(accumulate(self.durations_s, initial=self.start_s))[1:]

    @property
    def end_s(self) -> float:
        """Engine time after the run."""
        return self.ends_s[-1]

    @property
    def energy_j(self) -> float:
        """Energy of the whole run (summed in order; the engine's counter is the exact one)."""
        return sum(self.energies_j)

    def results(self) -> tuple[IterationResult, ...]:
        """Return the run as the per-iteration results :meth:`Engine.step` would give."""
        starts = (self.start_s, *self.ends_s[:-1])
        last = len(self.durations_s) - 1
        return tuple(
            IterationResult(
                start_s=starts[i],
                duration_s=self.durations_s[i],
                prefill_tokens=self.prefill_tokens,
                decode_tokens=self.decode_tokens,
                emitted=self.emitted,
                finished=self.finished if i == last else (),
                preempted=self.preempted,
                energy_j=self.energies_j[i],
                power_w=self.powers_w[i],
                clock_mhz=self.clock_mhz,
                kv_blocks_used=self.kv_blocks_used[i],
            )
            for i in range(len(self.durations_s))
        )

    @classmethod
    def of(cls, result: IterationResult) -> IterationRun:
        """Wrap one iteration as a run of one."""
        return cls(
            start_s=result.start_s,
            durations_s=(result.duration_s,),
            energies_j=(result.energy_j,),
            powers_w=(result.power_w,),
            kv_blocks_used=(result.kv_blocks_used,),
            prefill_tokens=result.prefill_tokens,
            decode_tokens=result.decode_tokens,
            emitted=result.emitted,
            finished=result.finished,
            preempted=result.preempted,
            clock_mhz=result.clock_mhz,
        )


@runtime_checkable
class MultiStepEngine(Engine, Protocol):
    """An :class:`Engine` that can also fast-forward several iterations in one call."""

    def step_many(self, max_iterations: int, until_s: float = float("inf")) -> IterationRun | None:
        """Run up to ``max_iterations`` iterations while ``now_s < until_s``; aggregate them.

        Contract (what a caller may rely on):

        - Returns ``None``, changing nothing, when ``max_iterations < 1``, when
          ``now_s >= until_s`` or when there is no work (then call :meth:`idle_until`).
        - Otherwise runs at least one iteration. The first one may be of any kind (prefill,
          admission, preemption); if it is, the run has exactly that one iteration. If it
          is a pure decode, the run continues with further pure-decode iterations of the
          same sequences and stops after the iteration that finishes a request, before an
          iteration that would prefill, admit or preempt, after ``max_iterations``
          iterations, or once ``now_s >= until_s`` (so the last iteration may end past
          ``until_s``, exactly as a ``while now_s < until_s: step()`` loop).
        - Engine state afterwards (time, energy counter, KV, queues) is exactly what as
          many :meth:`step` calls would leave, and :meth:`IterationRun.results` equals
          their results. Requests added, aborted or clock changes apply between runs,
          so pass the next arrival or control tick as ``until_s``.
        """
        ...
