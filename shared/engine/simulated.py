"""The simulated GPU engine: continuous batching driven in engine time, with cost and energy.

:class:`SimulatedEngine` implements :class:`shared.engine.api.Engine`. Each :meth:`step`
plans one iteration with :class:`~shared.engine.batching.ContinuousBatcher`, prices it with
:class:`~shared.engine.costs.CostModel` at the current clock, advances engine time by its
duration and adds ``power × duration`` (all GPUs) to a cumulative energy counter, as NVML's
``nvmlDeviceGetTotalEnergyConsumption`` does on a real GPU.

The engine schedules with :class:`~shared.engine.fast_batching.DecodeGroupBatcher` (O(1)
Python work per decoding group); ``reference=True`` selects the per-sequence reference
scheduler it is tested against. :meth:`SimulatedEngine.step_many` fast-forwards runs of
pure-decode iterations (contract in :class:`shared.engine.api.MultiStepEngine`).
"""

from __future__ import annotations

import math

from shared.engine.api import EngineConfig, EngineRequest, IterationResult, IterationRun
from shared.engine.batching import BatchStep, ContinuousBatcher, Sequence
from shared.engine.clock import DEFAULT_CLOCK_SETTINGS, ClockSettings
from shared.engine.coefficients import Coefficients, load_coefficients
from shared.engine.costs import CostModel
from shared.engine.fast_batching import DecodeGroupBatcher
from shared.engine.hardware import gpu_spec, kv_block_budget, model_shape

__all__ = ["SimulatedEngine", "create_engine"]


class SimulatedEngine:
    """A vLLM-like engine on simulated GPUs; see :mod:`shared.engine.api` for the contract."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        coefficients: Coefficients | None = None,
        clock_settings: ClockSettings = DEFAULT_CLOCK_SETTINGS,
        reference: bool = False,
    ) -> None:
        """Build an engine for ``config``.

        ``reference=True`` uses the per-sequence reference scheduler (same results, slower;
        for equivalence tests and the speed bench's baseline).

        Raises:
            ValueError: for an unknown GPU or model, a GPU type without coefficients, or
                a model whose weights do not fit the GPUs.
        """
        self._config = config
        self._gpu = gpu_spec(config.gpu)
        self._model = model_shape(config.model)
        coeffs = coefficients or load_coefficients()
        if self._gpu.name not in coeffs.gpus:
            raise ValueError(f"no calibrated coefficients for {self._gpu.name}")
        self._costs = CostModel(
            self._gpu, self._model, config.tp, coeffs.gpus[self._gpu.name], clock_settings
        )
        blocks = kv_block_budget(
            self._gpu,
            self._model,
            tp=config.tp,
            block_size=config.block_size,
            gpu_memory_utilization=config.gpu_memory_utilization,
            max_num_batched_tokens=config.max_num_batched_tokens,
        )
        batcher = ContinuousBatcher if reference else DecodeGroupBatcher
        self._batcher = batcher(
            total_blocks=blocks,
            block_size=config.block_size,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
        )
        self._clocks = self._gpu.supported_clocks_mhz
        self._clock = self._gpu.snap_clock(
            config.clock_mhz if config.clock_mhz is not None else self._gpu.max_clock_mhz
        )
        self._now = 0.0
        self._energy = 0.0

    @property
    def config(self) -> EngineConfig:
        """The configuration this engine was built from."""
        return self._config

    @property
    def now_s(self) -> float:
        """Current engine time."""
        return self._now

    @property
    def clock_mhz(self) -> float:
        """Current SM clock."""
        return self._clock

    @property
    def supported_clocks_mhz(self) -> tuple[float, ...]:
        """Supported SM clocks, ascending."""
        return self._clocks

    @property
    def num_running(self) -> int:
        """Sequences holding KV blocks."""
        return self._batcher.num_running

    @property
    def num_waiting(self) -> int:
        """Sequences queued (preempted ones included)."""
        return self._batcher.num_waiting

    @property
    def kv_blocks_total(self) -> int:
        """KV-cache blocks of the instance."""
        return self._batcher.total_blocks

    @property
    def kv_blocks_used(self) -> int:
        """KV-cache blocks in use."""
        return self._batcher.used_blocks

    @property
    def energy_j(self) -> float:
        """Cumulative energy of all GPUs since creation."""
        return self._energy

    @property
    def has_work(self) -> bool:
        """Whether any request is running or waiting."""
        return bool(self._batcher.num_running or self._batcher.num_waiting)

    @property
    def idle_power_w(self) -> float:
        """Power of the whole instance when idle."""
        return self._costs.idle_power_w_per_gpu * self._config.tp

    @property
    def cost_model(self) -> CostModel:
        """The latency and power model of this instance (for planners and profilers)."""
        return self._costs

    def add(self, request: EngineRequest) -> None:
        """Queue a request.

        Raises:
            ValueError: for a duplicate id, non-positive lengths, or a request whose prompt
                plus output can never fit the KV cache.
        """
        self._batcher.add(
            Sequence(
                request.request_id, request.prompt_tokens, request.output_tokens, request.arrival_s
            )
        )

    def abort(self, request_id: str) -> bool:
        """Drop a request; returns whether it was known."""
        return self._batcher.abort(request_id)

    def set_clock_mhz(self, mhz: float) -> float:
        """Set the SM clock, snapped to a supported step; returns the clock applied."""
        self._clock = self._gpu.snap_clock(mhz)
        return self._clock

    def step(self) -> IterationResult | None:
        """Run one iteration and advance engine time; ``None`` when there is no work."""
        batch = self._batcher.schedule()
        return None if batch is None else self._run(batch)

    def _run(self, batch: BatchStep) -> IterationResult:
        """Price a scheduled iteration, advance time and energy, and report it."""
        cost = self._costs.cost_of(
            batch.prefill_tokens,
            batch.decode_seqs,
            batch.attention_pairs,
            batch.kv_read_tokens,
            len(batch.emitted),
            self._clock,
        )
        power = cost.power_w_per_gpu * self._config.tp
        energy = power * cost.duration_s
        start = self._now
        self._now = start + cost.duration_s
        self._energy += energy
        return IterationResult(
            start_s=start,
            duration_s=cost.duration_s,
            prefill_tokens=batch.prefill_tokens,
            decode_tokens=batch.decode_seqs,
            emitted=batch.emitted,
            finished=batch.finished,
            preempted=batch.preempted,
            energy_j=energy,
            power_w=power,
            clock_mhz=self._clock,
            kv_blocks_used=self._batcher.used_blocks,
        )

    def step_many(self, max_iterations: int, until_s: float = math.inf) -> IterationRun | None:
        """Run up to ``max_iterations`` iterations while ``now_s < until_s``, aggregated.

        The contract is :meth:`shared.engine.api.MultiStepEngine.step_many`: one iteration
        of any kind, or a run of pure-decode iterations of the same sequences ending at the
        first finish, before any prefill/admission/preemption, or at either bound.
        """
        if max_iterations < 1 or self._now >= until_s:
            return None
        batcher = self._batcher
        batch = batcher.decode_step() if isinstance(batcher, DecodeGroupBatcher) else None
        if batch is None:
            if isinstance(batcher, DecodeGroupBatcher):
                batch = batcher.schedule_mixed()  # decode_step declined: skip re-checking
            else:
                batch = batcher.schedule()
            return None if batch is None else IterationRun.of(self._run(batch))
        assert isinstance(batcher, DecodeGroupBatcher)
        clock = self._clock
        tp = self._config.tp
        sequences = batch.decode_seqs
        cost = self._costs.cost_of(0, sequences, batch.attention_pairs, batch.kv_read_tokens,
                                   sequences, clock)  # fmt: skip
        power = cost.power_w_per_gpu * tp
        energy = power * cost.duration_s
        start = self._now
        # Same additions, in the same order, as step(): the counters stay bit-identical.
        self._now += cost.duration_s
        self._energy += energy
        out: tuple[list[float], list[float], list[float], list[int]] = (
            [cost.duration_s],
            [energy],
            [power],
            [batcher.used_blocks],
        )
        finished = batch.finished
        if not finished and max_iterations > 1 and self._now < until_s:
            self._now, self._energy, finished = batcher.fast_forward(
                self._costs.decode_pricing(sequences, clock), tp, max_iterations - 1,
                self._now, until_s, self._energy, out,
            )  # fmt: skip
        durations, energies, powers, kv_used = out
        return IterationRun(
            start_s=start,
            durations_s=tuple(durations),
            energies_j=tuple(energies),
            powers_w=tuple(powers),
            kv_blocks_used=tuple(kv_used),
            prefill_tokens=0,
            decode_tokens=sequences,
            emitted=batch.emitted,
            finished=finished,
            clock_mhz=clock,
        )

    def idle_until(self, t_s: float) -> float:
        """Advance engine time to ``t_s`` at idle power; returns the energy used."""
        if t_s <= self._now:
            return 0.0
        energy = self.idle_power_w * (t_s - self._now)
        self._now = t_s
        self._energy += energy
        return energy


def create_engine(
    config: EngineConfig,
    *,
    coefficients: Coefficients | None = None,
    clock_settings: ClockSettings = DEFAULT_CLOCK_SETTINGS,
    reference: bool = False,
) -> SimulatedEngine:
    """Build the simulated engine for ``config`` (calibrated coefficients by default).

    ``reference=True`` selects the slower per-sequence scheduler (identical results).

    Raises:
        ValueError: see :class:`SimulatedEngine`.
    """
    return SimulatedEngine(
        config, coefficients=coefficients, clock_settings=clock_settings, reference=reference
    )
