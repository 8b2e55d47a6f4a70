"""A pure per-step decode simulator with a barrier, for comparing placers (BF-IO seed 003, Sec. 6).

Model (seed 003 Sec. 1 and Eq. 6, made per worker):

- G workers with B slots each; placement is sticky and non-preemptive.
- Each step every running sequence emits one token; its KV grows by one; it leaves after
  its true output length. Load ``L_g`` is the KV held by worker g (Eq. 1).
- Per-worker step time is affine (:class:`StepTimeModel`):
  ``t_g = base_s + per_kv_token_s * L_g + per_prefill_token_s * prefill_g``; the step takes
  ``max_g t_g`` (the model-parallel barrier). ``prefill_g`` is nonzero only in the
  *aggregated* mode, where the worker that admits a request also runs its prompt; in the
  *disaggregated* mode requests reach the decode pool with their KV already built.
- Power (:class:`PowerModel`): a worker draws ``busy_w`` while computing its own ``t_g``
  and ``idle_w`` while waiting at the barrier; energy is summed over workers and steps
  (seed 003 Eq. 10 with a two-level power curve in place of the stripped MFU curve).
- The waiting pool is topped up to ``reveal_target`` from the request list whenever it
  falls below it (the paper's online revelation, which keeps the system overloaded).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from services.router.bfio import BalanceFuturePlacer
from services.router.lookahead import base_from_arrays
from services.router.placement import Candidate, Placer, WorkerLoad

__all__ = ["DecodeSimConfig", "DecodeSimResult", "PowerModel", "StepTimeModel", "simulate"]

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTimeModel:
    """Affine per-worker decode step time; the fitted values come from a loader."""

    base_s: float
    """Fixed cost of one step (weights read, collectives)."""
    per_kv_token_s: float
    """Attention cost per resident KV token."""
    per_prefill_token_s: float = 0.0
    """Cost per prompt token prefilled in the same step (aggregated mode only)."""

    def worker_times(self, kv_load: FloatArray, prefill_tokens: FloatArray) -> FloatArray:
        """Return each worker's own compute time for one step."""
        return np.asarray(
            self.base_s + self.per_kv_token_s * kv_load + self.per_prefill_token_s * prefill_tokens,
            dtype=np.float64,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PowerModel:
    """Two-level power of one worker: computing, or waiting at the barrier."""

    busy_w: float
    idle_w: float


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeSimConfig:
    """One simulated run."""

    workers: int = 16
    batch: int = 72
    steps: int = 2000
    """Steps to run; 0 runs every request to completion (a fixed workload)."""
    reveal_target: int = 1152
    mode: Literal["disaggregated", "aggregated"] = "disaggregated"
    warmup_steps: int = 0
    """Steps run before measuring (the cold start fills an empty fleet in one decision)."""
    max_wait_s: float = float("inf")
    """Waiting-time budget; a request's laxity is what is left of it, so placers admit it
    once that falls to their urgency threshold (a stand-in for the scheduler's LLF laxity)."""


@dataclass(slots=True, kw_only=True)
class DecodeSimResult:
    """Per-run aggregates (seed 003 Eqs. 7-10)."""

    steps: int
    tokens: int
    time_s: float
    energy_j: float
    imbalance_sum: float
    """Mean over steps of Eq. 2: ``sum_g (max L - L_g)`` in tokens."""
    imbalance_gap: float
    """Mean over steps of ``max L - mean L`` in tokens."""
    idle_fraction: float
    """Share of worker-time spent waiting at the barrier."""
    tpot_s: float
    """Mean over completed requests of (end - admission time) / output tokens (Eq. 9)."""
    completed: int
    mean_load: float
    """Mean over steps and workers of the resident KV tokens."""
    wait_s: list[float] = field(default_factory=list)
    """Pool waiting time of each request admitted in the measured window."""
    decision_s: list[float] = field(default_factory=list)
    """Wall time of each decision, including any wait for a CPU on a shared machine."""
    decision_cpu_s: list[float] = field(default_factory=list)
    """Thread CPU time of each decision (robust to other processes on the machine)."""
    decision_open_slots: list[int] = field(default_factory=list)
    """Open slots at each timed decision (separates cold start from steady state)."""

    @property
    def throughput_tok_s(self) -> float:
        """Generated tokens per second (Eq. 8)."""
        return self.tokens / self.time_s

    @property
    def energy_per_token_j(self) -> float:
        """Energy per generated token."""
        return self.energy_j / self.tokens


Decider = Callable[[FloatArray, FloatArray, IntArray, FloatArray, FloatArray], IntArray]


def _object_decider(placer: Placer, config: DecodeSimConfig) -> Decider:
    """Adapt a generic placer: build the snapshots the live router would build."""
    ids = [f"w{g}" for g in range(config.workers)]
    index = {worker_id: g for g, worker_id in enumerate(ids)}
    made: dict[int, Candidate] = {}

    def decide(
        kv: FloatArray,
        remaining: FloatArray,
        pool: IntArray,
        prompts: FloatArray,
        laxity: FloatArray,
    ) -> IntArray:
        active = remaining > 0
        loads = [
            WorkerLoad(
                worker_id=ids[g],
                free_slots=int(config.batch - active[g].sum()),
                running=int(active[g].sum()),
                kv_tokens=int(kv[g][active[g]].sum()),
                predicted_remaining=tuple(remaining[g][active[g]].astype(int).tolist()),
                running_kv=tuple(kv[g][active[g]].astype(int).tolist()),
            )
            for g in range(config.workers)
        ]
        # Candidates persist while queued, as in the live scheduler; build each once.
        for i in pool.tolist():
            if i not in made:
                made[i] = Candidate(
                    request_id=str(i), prompt_tokens=int(prompts[i]), predicted_output_tokens=0
                )
        cands = [made[i] for i in pool.tolist()]
        for cand, slack in zip(cands, laxity.tolist(), strict=True):
            cand.laxity_s = slack
        assign = np.full(pool.shape[0], -1, dtype=np.int64)
        position = {int(r): p for p, r in enumerate(pool.tolist())}
        for request_id, worker_id in placer.place(cands, loads):
            assign[position[int(request_id)]] = index[worker_id]
            del made[int(request_id)]
        return assign

    return decide


def _array_decider(placer: BalanceFuturePlacer) -> Decider:
    """BF-IO straight from the simulator's arrays (what the router's own state would be)."""

    def decide(
        kv: FloatArray,
        remaining: FloatArray,
        pool: IntArray,
        prompts: FloatArray,
        laxity: FloatArray,
    ) -> IntArray:
        active = remaining > 0
        refill = placer.refill_tokens(prompts[pool])
        base = base_from_arrays(kv, remaining.astype(np.int64), active, placer.horizon, refill)
        free = (~active).sum(axis=1).astype(np.int64)
        return placer.assign_arrays(base, free, prompts[pool], laxity)

    return decide


def simulate(
    prompts: IntArray,
    outputs: IntArray,
    placer: Placer,
    config: DecodeSimConfig,
    step_model: StepTimeModel,
    power: PowerModel,
) -> DecodeSimResult:
    """Run one simulation and return its aggregates.

    Args:
        prompts: prompt tokens of the requests, in arrival order.
        outputs: true output tokens of the requests (>= 1).
        placer: the policy; BF-IO takes the array path, others get object snapshots.
        config: fleet shape, run length, pool size and mode.
        step_model: per-worker step time.
        power: per-worker power levels.
    """
    count, batch = config.workers, config.batch
    prompt_f = prompts.astype(np.float64)
    decide = (
        _array_decider(placer)
        if isinstance(placer, BalanceFuturePlacer)
        else _object_decider(placer, config)
    )
    kv = np.zeros((count, batch))
    remaining = np.zeros((count, batch))  # 0 marks a free slot
    owner = np.full((count, batch), -1, dtype=np.int64)
    start = np.zeros(prompts.shape[0])
    revealed_at = np.zeros(prompts.shape[0])
    pool = np.zeros(0, dtype=np.int64)
    revealed, clock, steps_run = 0, 0.0, 0
    totals = _Totals()
    limit = config.steps or 10**9
    while steps_run < limit:
        drained = revealed == prompts.shape[0] and not pool.size and not (remaining > 0).any()
        if config.steps == 0 and drained:
            break
        steps_run += 1
        measuring = steps_run > config.warmup_steps
        if pool.shape[0] < config.reveal_target and revealed < prompts.shape[0]:
            extra = min(config.reveal_target - pool.shape[0], prompts.shape[0] - revealed)
            pool = np.concatenate([pool, np.arange(revealed, revealed + extra)])
            revealed_at[revealed : revealed + extra] = clock
            revealed += extra
        prefill = np.zeros(count)
        if pool.shape[0] and (remaining == 0).any():
            totals.decision_slots.append(int((remaining == 0).sum()))
            began, began_cpu = time.perf_counter(), time.thread_time()
            laxity = config.max_wait_s - (clock - revealed_at[pool])
            assign = decide(kv, remaining, pool, prompt_f, laxity)
            totals.decisions.append(time.perf_counter() - began)
            totals.decisions_cpu.append(time.thread_time() - began_cpu)
            for p in np.flatnonzero(assign >= 0).tolist():
                g, request = int(assign[p]), int(pool[p])
                slot = int(np.flatnonzero(remaining[g] == 0)[0])
                kv[g, slot], remaining[g, slot] = prompts[request], outputs[request]
                owner[g, slot] = request
                # TPOT counts only requests admitted inside the measured window.
                start[request] = clock if measuring else -1.0
                if measuring:
                    totals.waits.append(clock - revealed_at[request])
                prefill[g] += prompts[request]
            pool = pool[assign < 0]
        active = remaining > 0
        load = (kv * active).sum(axis=1)
        own = step_model.worker_times(load, prefill if config.mode == "aggregated" else prefill * 0)
        step = float(own.max())
        clock += step
        kv += active
        remaining -= active
        done = active & (remaining == 0)
        if measuring:
            totals.add_step(load, own, step, power)
            totals.tokens += int(active.sum())
            for request in owner[done].tolist():
                if start[request] >= 0:
                    totals.tpot_sum += (clock - start[request]) / outputs[request]
                    totals.completed += 1
        owner[done] = -1
    return totals.result(count)


@dataclass(slots=True)
class _Totals:
    """Running sums over the measured (post-warm-up) steps."""

    steps: int = 0
    tokens: int = 0
    time_s: float = 0.0
    energy_j: float = 0.0
    idle_s: float = 0.0
    imbalance: float = 0.0
    gap: float = 0.0
    load: float = 0.0
    tpot_sum: float = 0.0
    completed: int = 0
    decisions: list[float] = field(default_factory=list)
    decisions_cpu: list[float] = field(default_factory=list)
    decision_slots: list[int] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)

    def add_step(self, load: FloatArray, own: FloatArray, step: float, power: PowerModel) -> None:
        """Account one barrier step: Eq. 2 imbalance, tokens, time and energy."""
        count = load.shape[0]
        self.steps += 1
        self.time_s += step
        self.energy_j += float((power.busy_w * own + power.idle_w * (step - own)).sum())
        self.idle_s += float((step - own).sum())
        self.imbalance += float(count * load.max() - load.sum())
        self.gap += float(load.max() - load.mean())
        self.load += float(load.mean())

    def result(self, count: int) -> DecodeSimResult:
        """Return the per-run aggregates."""
        steps = max(1, self.steps)
        return DecodeSimResult(
            steps=self.steps,
            tokens=self.tokens,
            time_s=self.time_s,
            energy_j=self.energy_j,
            imbalance_sum=self.imbalance / steps,
            imbalance_gap=self.gap / steps,
            idle_fraction=self.idle_s / (self.time_s * count) if self.time_s else 0.0,
            tpot_s=self.tpot_sum / self.completed if self.completed else float("nan"),
            completed=self.completed,
            mean_load=self.load / steps,
            wait_s=self.waits,
            decision_s=self.decisions,
            decision_cpu_s=self.decisions_cpu,
            decision_open_slots=self.decision_slots,
        )
