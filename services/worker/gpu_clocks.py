"""Clock commands on a GPU node that opted in: applied to the instance's GPUs by the clock agent.

With ``worker.gpu_clocks: nvml`` a worker's clock commands (the dvfs agent's and, through
its caps, the planner's) lock the SM clock of the instance's GPUs (``worker.nvml_gpu_indices``)
through the node's clock agent (``services.clockd``, the privileged process; the worker
itself needs no privilege). The agent checks and snaps the clock; its reply becomes the
ClockReply: the clock applied, or the refusal and its reason. A backend that models the
clock itself (the simulator) is then set to the applied clock too, so what it reports
follows the GPU; the clock the worker reports is the one its GPUs are set to, read from
the agent each stats period (a lock, or the driver's maximum after a reset).

The time each change took (the worker's round trip to the agent, which includes the NVML
calls) is the histogram ``greenserve_gpu_clock_change_seconds``; refusals are counted by
reason in ``greenserve_gpu_clock_refusals_total``, and each reason is logged once, as an
error, so a node without privilege says so once and runs at default clocks.

On close the worker asks the agent to reset its GPUs (the agent also resets every GPU
when it starts and when it exits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from typing import Final

from prometheus_client import Counter, Histogram

from proto.messages import ClassifiedRequest
from services.worker.backend import BackendSnapshot, ClockOutcome, OutputSink, WorkerBackend
from shared.gpu.clock_agent import ClockAgentClient, ClockAgentUnreachableError

__all__ = ["CLOCK_CHANGE_SECONDS", "CLOCK_REFUSALS", "AgentClockedBackend"]

logger = logging.getLogger(__name__)

CLOCK_CHANGE_SECONDS: Final = Histogram(
    "greenserve_gpu_clock_change_seconds",
    "Time one clock change of an instance's GPUs took, through the clock agent and NVML",
    ["worker"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
CLOCK_REFUSALS: Final = Counter(
    "greenserve_gpu_clock_refusals",
    "Clock commands the GPUs did not take, by reason (no_permission, not_supported, "
    "out_of_range, agent_unreachable, ...): the instance runs at its current clock",
    ["worker", "reason"],
)
UNREACHABLE: Final = "agent_unreachable"


class AgentClockedBackend:
    """A worker backend whose clock commands go to the node's clock agent."""

    def __init__(
        self,
        inner: WorkerBackend,
        agent: ClockAgentClient,
        gpu_indices: tuple[int, ...],
        worker_id: str,
    ) -> None:
        """Send ``inner``'s clock commands for GPUs ``gpu_indices`` to ``agent``."""
        if not gpu_indices:
            raise ValueError(
                "worker.gpu_clocks nvml needs worker.nvml_gpu_indices: the instance's GPUs"
            )
        self._inner = inner
        self._agent = agent
        self._gpus = list(gpu_indices)
        self._worker_id = worker_id
        self._logged: set[str] = set()
        self._gpu_clock_mhz: float | None = None
        """The clock the GPUs are set to (locked, or the driver's maximum), as last read."""
        self._mirrored_mhz: float | None = None
        """The clock last passed on to the engine backend."""
        self._reading: asyncio.Task[None] | None = None
        """The read of the GPUs' clock in progress."""

    @property
    def inner(self) -> WorkerBackend:
        """The engine backend."""
        return self._inner

    @property
    def name(self) -> str:
        """The engine backend's name."""
        return self._inner.name

    async def start(self, sink: OutputSink) -> None:
        """Start the engine backend."""
        await self._inner.start(sink)

    async def run(self) -> None:
        """Drive the engine backend."""
        await self._inner.run()

    def submit(self, request: ClassifiedRequest) -> None:
        """Start a request on the engine backend."""
        self._inner.submit(request)

    def abort(self, request_id: str) -> None:
        """Stop a request on the engine backend."""
        self._inner.abort(request_id)

    async def refresh(self) -> None:
        """Refresh the engine backend's snapshot; read the GPUs' clock in the background.

        In the background because the agent may be slow (a driver call in progress): the
        stats period, which is the worker's heartbeat, must not wait for it.
        """
        await self._inner.refresh()
        reading = self._reading
        if reading is not None and not reading.done():
            return
        if reading is not None and not reading.cancelled() and reading.exception() is not None:
            logger.warning("reading the GPUs' clock failed: %r", reading.exception())
        self._reading = asyncio.create_task(self.read_gpu_clock())

    async def read_gpu_clock(self) -> None:
        """Read the clock the GPUs are set to from the agent, and pass it on to the engine.

        The GPUs' clock is their lock, or their highest supported clock where the driver
        manages them (after a reset, or a clock agent that restarted and reset them): the
        dvfs agent then sees the clock it must command again.
        """
        try:
            status = await self._agent.status(self._gpus)
        except ClockAgentUnreachableError:
            return  # the next command says so, once; the last known clock stands
        clocks = [g.locked_mhz or g.supported_max_mhz for g in status.gpus]
        if not status.ok or not clocks or None in clocks:
            return
        set_mhz = float(min(c for c in clocks if c is not None))
        self._gpu_clock_mhz = set_mhz
        if set_mhz != self._mirrored_mhz:  # once per change, not each period
            await self._mirror(set_mhz)

    def snapshot(self) -> BackendSnapshot:
        """The engine backend's snapshot, with the clock the GPUs are set to once known."""
        snap = self._inner.snapshot()
        if self._gpu_clock_mhz is None:
            return snap
        return replace(snap, clock_mhz=self._gpu_clock_mhz)

    def _refuse(self, reason: str, message: str) -> ClockOutcome:
        CLOCK_REFUSALS.labels(self._worker_id, reason).inc()
        if reason not in self._logged:  # once per cause: a policy repeats it each period
            self._logged.add(reason)
            logger.error(
                "GPU clocks of %s (GPUs %s) not set: %s; the GPUs keep their current clocks",
                self._worker_id,
                self._gpus,
                message,
            )
        return ClockOutcome(
            applied_mhz=self.snapshot().clock_mhz,
            accepted=False,
            reason=f"{reason}: {message}",
        )

    async def set_clock(self, mhz: float) -> ClockOutcome:
        """Lock the instance's GPUs at ``mhz`` through the clock agent (checked, snapped)."""
        start = time.perf_counter()
        try:
            reply = await self._agent.lock(self._gpus, mhz)
        except ClockAgentUnreachableError as exc:
            return self._refuse(UNREACHABLE, str(exc))
        if not reply.ok or reply.applied_mhz is None:
            return self._refuse(reply.reason or "refused", reply.message)
        CLOCK_CHANGE_SECONDS.labels(self._worker_id).observe(time.perf_counter() - start)
        applied = self._gpu_clock_mhz = float(reply.applied_mhz)
        await self._mirror(applied)
        return ClockOutcome(
            applied_mhz=applied, accepted=True, reason=reply.message if reply.snapped else ""
        )

    async def _mirror(self, mhz: float) -> None:
        """Set the engine backend to the GPUs' clock: the simulator follows the GPU; a vLLM
        backend without a clock endpoint refuses, which is right (its GPUs are the GPUs)."""
        self._mirrored_mhz = mhz
        await self._inner.set_clock(mhz)

    async def close(self) -> None:
        """Reset the instance's GPUs to default clocks, then close the engine backend."""
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reading
        try:
            reply = await self._agent.reset(self._gpus)
            if not reply.ok and reply.reason not in self._logged:  # a known cause: said once
                logger.warning("clock agent did not reset GPUs %s: %s", self._gpus, reply.message)
        except ClockAgentUnreachableError as exc:
            logger.warning("could not ask for GPUs %s to be reset: %s", self._gpus, exc)
        finally:
            await self._inner.close()
