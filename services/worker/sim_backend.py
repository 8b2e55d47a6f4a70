"""The ``sim`` backend: the calibrated engine model in-process, in model time.

An iteration of d model seconds takes d / K wall seconds (``clock.speedup`` K). Every
iteration becomes one :class:`~services.worker.backend.OutputBatch` carrying the
iteration's energy; power is the engine's energy counter differentiated over engine time
between snapshots, as one would from NVML's counter.
"""

from __future__ import annotations

from proto.messages import ClassifiedRequest
from services.worker.backend import (
    BackendRefusalError,
    BackendSnapshot,
    ClockOutcome,
    OutputBatch,
    OutputSink,
)
from services.worker.pacing import PacedEngine
from shared.engine import Engine, IterationResult

__all__ = ["SimBackend"]


class SimBackend:
    """Runs a simulated engine; see :class:`~services.worker.backend.WorkerBackend`."""

    def __init__(self, engine: Engine, speedup: float) -> None:
        """Drive ``engine`` at ``speedup`` model seconds per wall second."""
        self._paced = PacedEngine(engine, speedup)
        self._engine = engine
        self._sink: OutputSink | None = None
        self._last_energy = (0.0, 0.0)  # (engine time, energy) at the previous snapshot
        self._power_w = 0.0

    @property
    def name(self) -> str:
        """``sim``."""
        return "sim"

    @property
    def engine(self) -> Engine:
        """The engine model."""
        return self._engine

    async def start(self, sink: OutputSink) -> None:
        """Remember where output goes."""
        self._sink = sink

    async def run(self) -> None:
        """Iterate the engine in model time until cancelled."""
        await self._paced.run(self._on_iteration)

    async def _on_iteration(self, result: IterationResult, at: float) -> None:
        if self._sink is None:
            raise RuntimeError("SimBackend.run called before start")
        await self._sink.on_output(_batch_of(result, at))

    def submit(self, request: ClassifiedRequest) -> None:
        """Queue a request that arrives now; it generates exactly ``max_tokens`` tokens.

        Raises:
            BackendRefusalError: ``kv_capacity`` when prompt plus output can never fit the KV cache.
        """
        try:
            self._paced.add(
                request.request.request_id, request.input_tokens, request.request.max_tokens
            )
        except ValueError as exc:
            raise BackendRefusalError("kv_capacity", str(exc)) from exc

    def abort(self, request_id: str) -> None:
        """Drop a request from the engine."""
        self._paced.abort(request_id)

    async def set_clock(self, mhz: float) -> ClockOutcome:
        """Set the simulated SM clock, snapped to a supported step."""
        return ClockOutcome(applied_mhz=self._engine.set_clock_mhz(mhz), accepted=True)

    async def refresh(self) -> None:
        """Nothing to fetch: the engine is in-process."""

    def snapshot(self) -> BackendSnapshot:
        """The engine's counters; power over engine time since the previous snapshot."""
        eng = self._engine
        t_prev, e_prev = self._last_energy
        if eng.now_s > t_prev:
            self._power_w = (eng.energy_j - e_prev) / (eng.now_s - t_prev)
            self._last_energy = (eng.now_s, eng.energy_j)
        return BackendSnapshot(
            gpu=eng.config.gpu,
            model=eng.config.model,
            tp=eng.config.tp,
            running=eng.num_running,
            waiting=eng.num_waiting,
            kv_blocks_used=eng.kv_blocks_used,
            kv_blocks_total=eng.kv_blocks_total,
            kv_block_size=eng.config.block_size,
            clock_mhz=eng.clock_mhz,
            power_w=max(0.0, self._power_w),
            energy_j=eng.energy_j,
        )

    async def close(self) -> None:
        """Nothing to release."""


def _batch_of(result: IterationResult, at: float) -> OutputBatch:
    return OutputBatch(
        emitted=result.emitted,
        finished=result.finished,
        preempted=result.preempted,
        energy_j=result.energy_j,
        at=at,
    )
