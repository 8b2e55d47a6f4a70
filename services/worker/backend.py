"""The interface between the worker shim and the engine it fronts.

The shim owns the bus (dispatch accept/refuse, token chunks, completions, stats, drain);
a backend owns the engine: it runs requests and reports what they produced as
:class:`OutputBatch` values to an :class:`OutputSink` (the shim). Three backends exist:
``sim`` (the engine model in-process, in model time), ``instant`` (every request done at
once, for control-plane benchmarks) and ``vllm`` (a vLLM server over HTTP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from proto.messages import ClassifiedRequest

__all__ = [
    "BackendRefusalError",
    "BackendSnapshot",
    "ClockOutcome",
    "OutputBatch",
    "OutputSink",
    "WorkerBackend",
]


class BackendRefusalError(Exception):
    """A request the backend can never serve (a final error, not a retry elsewhere)."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputBatch:
    """Tokens some requests produced at one wall instant (one engine iteration or SSE event)."""

    emitted: tuple[str, ...]
    """One entry per output token; a request id repeats when it produced several tokens."""
    finished: tuple[str, ...] = ()
    """Requests whose last token is in this batch (or before it)."""
    preempted: tuple[str, ...] = ()
    energy_j: float = 0.0
    """Energy the instance used for these tokens; split evenly over ``emitted``."""
    at: float
    """Wall time the tokens were produced."""
    finish_reasons: dict[str, str] | None = None
    """Why each finished request ended (``length`` when absent)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendSnapshot:
    """The engine's state for the worker's stats and heartbeat."""

    gpu: str
    model: str
    tp: int
    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    kv_block_size: int
    clock_mhz: float
    power_w: float
    """Average power of the instance since the previous snapshot."""
    energy_j: float
    """Cumulative energy counter of the instance."""


@dataclass(frozen=True, slots=True)
class ClockOutcome:
    """What happened to a clock command."""

    applied_mhz: float
    accepted: bool
    reason: str = ""


class OutputSink(Protocol):
    """Where a backend reports output (implemented by the worker shim)."""

    async def on_output(self, batch: OutputBatch) -> None:
        """Account and publish tokens, completions and their energy."""
        ...

    async def on_failure(self, request_id: str, code: str, reason: str) -> None:
        """End an accepted request with a final error."""
        ...


class WorkerBackend(Protocol):
    """An engine behind one worker."""

    @property
    def name(self) -> str:
        """Backend name as in ``worker.backend``."""
        ...

    async def start(self, sink: OutputSink) -> None:
        """Open connections; from now on output goes to ``sink``."""
        ...

    async def run(self) -> None:
        """Drive the engine until cancelled."""
        ...

    def submit(self, request: ClassifiedRequest) -> None:
        """Start a request.

        Raises:
            BackendRefusalError: when the request can never be served by this engine.
        """
        ...

    def abort(self, request_id: str) -> None:
        """Stop a request; its output is no longer reported."""
        ...

    async def set_clock(self, mhz: float) -> ClockOutcome:
        """Apply an SM clock (snapped to a supported step) or say why not."""
        ...

    async def refresh(self) -> None:
        """Update what :meth:`snapshot` reports (scrape metrics); called each stats period."""
        ...

    def snapshot(self) -> BackendSnapshot:
        """Current state, cheap and synchronous."""
        ...

    async def close(self) -> None:
        """Release connections (idempotent)."""
        ...
