"""SLO-safe admission at the worker: throttLL'eM's scoreboard checked on every dispatch.

The worker knows its engine exactly, so it decides. On a dispatch it projects batch size
and KV blocks over the coming iterations for the requests it holds plus the candidate
(throttLL'eM Eq. 1–2), prices each iteration with the backend's own iteration-time model
(Eq. 3) and refuses with reason ``admission`` when the KV cache would overflow or an
admitted request would miss its deadline (Eq. 4); see
:func:`services.worker.admission.check_admission`.

Iteration time per backend:

* ``sim``: the engine's calibrated cost model (``CostModel.cost_of``) at the engine's
  current clock, for a pure decode of B sequences over the projected context; the prefill
  of requests that have not produced a token yet (the candidate included) is added to the
  first iteration.
* ``vllm``: KV only (the server's iteration time is not modelled here), and only when the
  server reports its real block count; otherwise admission is off.
* ``instant``: off (nothing to protect).

A refusal *closes* the gate: until a request ends here (or ``hold_s`` wall seconds pass)
the worker refuses at once and advertises no free slot, so the router does not offer the
same queue head again and again; the scheduler keeps the request in LLF order meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from proto.messages import ClassifiedRequest
from services.worker.admission import (
    AdmissionConfig,
    AdmissionDecision,
    IterationTimeModel,
    ScoreboardEntry,
    check_admission,
)
from services.worker.backend import WorkerBackend
from services.worker.gpu_clocks import AgentClockedBackend
from services.worker.sim_backend import SimBackend
from services.worker.vllm_backend import KV_FRACTION_BLOCKS, VllmBackend
from shared.domain.projection import FloatArray, IntArray
from shared.engine import SimulatedEngine
from shared.engine.costs import CostModel

__all__ = [
    "REFUSAL_REASON",
    "AdmissionGate",
    "EngineLimits",
    "decode_iteration_time",
    "engine_limits",
    "judge",
    "limits_of",
    "scoreboard_entry",
]

REFUSAL_REASON: Final = "admission"
"""``DispatchReply.reason`` of a request refused by the gate."""


def decode_iteration_time(
    costs: CostModel, clock_mhz: float, block_tokens: int, prefill_s: float = 0.0
) -> IterationTimeModel:
    """The engine's pure-decode iteration time for (batch, KV blocks) arrays (throttLL'eM Eq. 3).

    ``costs.cost_of(0, B, C, C, B, clock_mhz).duration_s`` (to float rounding) with
    C = KV blocks × ``block_tokens`` (an upper bound of the context: the last block of
    each sequence is counted full), vectorised over the projection's iterations.

    Args:
        costs: the engine's cost model.
        clock_mhz: the clock the projection assumes.
        block_tokens: tokens per KV block.
        prefill_s: extra seconds added to the first iteration (pending prefills).
    """

    one = costs.decode_pricing(1, clock_mhz)
    two = costs.decode_pricing(2, clock_mhz)
    p = one.sharpness

    def model(batch: IntArray, kv_blocks: IntArray) -> FloatArray:
        # Per-sequence terms are linear in B (allreduce affine), so one pricing serves all B.
        seqs = batch.astype(np.float64)
        context = kv_blocks.astype(np.float64) * block_tokens
        linear = one.linear_flops * seqs
        compute_s = (linear + one.attention_flops_per_pair * context) / one.flop_rate / one.s
        memory_s = (one.weight_bytes + one.kv_bytes_per_token * context) / one.mem_rate
        memory_s = memory_s * one.slowdown
        out = (compute_s**p + memory_s**p) ** (1.0 / p) + one.kernel_layers_at_s
        out = out + one.token_time * seqs + one.host_fixed_s
        out = out + one.allreduce_s + (two.allreduce_s - one.allreduce_s) * (seqs - 1.0)
        out = np.where(batch > 0, out, 0.0)
        if out.size:
            out[0] += prefill_s
        return out

    return model


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """What admission knows of one engine right now."""

    kv_capacity_blocks: int
    block_tokens: int
    costs: CostModel | None = None
    """Iteration-time model; None checks the KV cache only."""
    clock_mhz: float = 0.0


def engine_limits(engine: SimulatedEngine) -> EngineLimits:
    """What admission knows of a simulated engine now: its KV cache, cost model and clock
    (the live ``sim`` backend's and the simulator's instances')."""
    return EngineLimits(
        engine.kv_blocks_total, engine.config.block_size, engine.cost_model, engine.clock_mhz
    )


def limits_of(backend: WorkerBackend) -> EngineLimits | None:
    """The admission limits a backend supports now, or None when admission is off for it."""
    if isinstance(backend, AgentClockedBackend):  # clocks through the agent, same engine
        backend = backend.inner
    if isinstance(backend, SimBackend) and isinstance(backend.engine, SimulatedEngine):
        return engine_limits(backend.engine)
    if isinstance(backend, VllmBackend):
        snap = backend.snapshot()
        if snap.kv_blocks_total > 0 and snap.kv_blocks_total != KV_FRACTION_BLOCKS:
            return EngineLimits(snap.kv_blocks_total, snap.kv_block_size)
    return None


def _no_time(batch: IntArray, kv_blocks: IntArray) -> FloatArray:
    del kv_blocks
    return np.zeros(batch.shape, dtype=np.float64)


def judge(
    running: Sequence[ScoreboardEntry],
    candidate: ScoreboardEntry,
    pending_prompts: Sequence[int],
    limits: EngineLimits,
    now_s: float,
) -> AdmissionDecision:
    """The admission check of one dispatch (throttLL'eM Eq. 1–4), pure: the live gate and
    the simulator's instances (``PolicySet.worker_admission``) both decide with it.

    Args:
        running: the engine's scoreboard now.
        candidate: the request that asks to start.
        pending_prompts: prompt tokens of the running requests that have no token yet (their
            prefill delays the first projected iteration).
        limits: the engine's KV capacity, block size and, optionally, its cost model.
        now_s: now on the deadlines' clock.
    """
    config = AdmissionConfig(
        kv_capacity_blocks=limits.kv_capacity_blocks, block_tokens=limits.block_tokens
    )
    model: IterationTimeModel = _no_time
    if limits.costs is not None:
        with_candidate = _prefill_s(limits, [*pending_prompts, candidate.prompt_tokens])
        alone = _prefill_s(limits, list(pending_prompts))
        base = decode_iteration_time(limits.costs, limits.clock_mhz, limits.block_tokens)
        n_running = len(running)

        def model(batch: IntArray, kv_blocks: IntArray) -> FloatArray:
            out = base(batch, kv_blocks)
            # check_admission projects with and without the candidate; the first
            # iteration's batch tells which, and so whose prefill delays it.
            if out.size:
                out[0] += with_candidate if int(batch[0]) > n_running else alone
            return out

    return check_admission(running, candidate, now_s=now_s, config=config, iteration_time=model)


def scoreboard_entry(
    request_id: str,
    prompt_tokens: int,
    generated: int,
    predicted_output_tokens: int,
    max_tokens: int,
    deadline_s: float | None,
) -> ScoreboardEntry:
    """One request on a scoreboard. Past its prediction a request runs to ``max_tokens`` at
    most (throttLL'eM's overrun rule, with the request's own cap instead of a global one)."""
    predicted = min(predicted_output_tokens, max_tokens)
    remaining = predicted - generated if predicted > generated else max_tokens - generated
    return ScoreboardEntry(
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        generated_tokens=generated,
        predicted_remaining_tokens=max(remaining, 1),
        deadline_s=deadline_s,
    )


@dataclass(slots=True)
class _Held:
    request: ClassifiedRequest
    generated: int = 0


class AdmissionGate:
    """Scoreboard of one worker: its requests, their progress, and the admission check."""

    def __init__(self, *, enabled: bool, hold_s: float) -> None:
        """Check dispatches when ``enabled``; a refusal closes the gate for ``hold_s`` wall s."""
        self._enabled = enabled
        self._hold_s = hold_s
        self._held: dict[str, _Held] = {}
        self._closed_until: float | None = None
        self.refusals = 0
        self.last_decision: AdmissionDecision | None = None

    @property
    def closed(self) -> bool:
        """Whether the gate refuses every dispatch now (it refused one and nothing ended)."""
        if self._closed_until is not None and time.time() >= self._closed_until:
            self._closed_until = None
        return self._closed_until is not None

    def advertised_slots(self, max_num_seqs: int, in_flight: int) -> int:
        """The sequence limit to report in stats: no room while closed."""
        return min(in_flight, max_num_seqs) if self.closed else max_num_seqs

    def admit(
        self, candidate: ClassifiedRequest, now_s: float, limits: EngineLimits | None
    ) -> bool:
        """Decide one dispatch at model time ``now_s``; closes the gate on a refusal."""
        if not self._enabled or limits is None or not self._held:
            return True  # an idle engine always takes work, or nothing would ever start
        if self.closed:
            self.refusals += 1
            return False
        running = [_entry(h.request, h.generated) for h in self._held.values()]
        pending = [h.request.input_tokens for h in self._held.values() if h.generated == 0]
        decision = judge(running, _entry(candidate, 0), pending, limits, now_s)
        self.last_decision = decision
        if decision.admitted:
            return True
        self.refusals += 1
        self._closed_until = time.time() + self._hold_s
        return False

    def opened(self, request: ClassifiedRequest) -> None:
        """Put an accepted request on the scoreboard."""
        self._held.setdefault(request.request.request_id, _Held(request))

    def observe(self, emitted: Iterable[str], ended: Iterable[str]) -> bool:
        """Count produced tokens and forget ended requests; return whether the gate reopened."""
        for rid in emitted:
            held = self._held.get(rid)
            if held is not None:
                held.generated += 1
        reopened = False
        for rid in ended:
            if self._held.pop(rid, None) is not None and self._closed_until is not None:
                self._closed_until = None
                reopened = True
        return reopened


def _entry(request: ClassifiedRequest, generated: int) -> ScoreboardEntry:
    return scoreboard_entry(
        request.request.request_id,
        request.input_tokens,
        generated,
        request.predicted_output_tokens,
        request.request.max_tokens,
        request.deadline_s,
    )


def _prefill_s(limits: EngineLimits, prompts: list[int]) -> float:
    if not prompts or limits.costs is None:
        return 0.0
    total = sum(prompts)
    pairs = sum(p * (p + 1) / 2.0 for p in prompts)
    cost = limits.costs.cost_of(total, 0, pairs, 0.0, len(prompts), limits.clock_mhz)
    return cost.duration_s
