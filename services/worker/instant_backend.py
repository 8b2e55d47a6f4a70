"""The ``instant`` backend: every request completes at once, all tokens in one chunk.

It uses no energy and takes no model time, so a stack of instant workers measures only
the control plane's own overhead (classify, queue, place, dispatch, stream, complete) —
the control-plane throughput benchmark of issue 7. Clocks are accepted as given (there is
no GPU to snap to) so a dvfs agent in fixed mode stays quiet.
"""

from __future__ import annotations

import asyncio
import time

from proto.messages import ClassifiedRequest
from services.worker.backend import BackendSnapshot, ClockOutcome, OutputBatch, OutputSink

__all__ = ["InstantBackend"]


class InstantBackend:
    """Completes requests as fast as the sink takes them."""

    def __init__(self, *, gpu: str, model: str, tp: int) -> None:
        """Report ``gpu``, ``model`` and ``tp`` in stats; nothing runs on them."""
        self._gpu = gpu
        self._model = model
        self._tp = tp
        self._pending: dict[str, int] = {}
        self._work = asyncio.Event()
        self._sink: OutputSink | None = None
        self._clock_mhz = 0.0

    @property
    def name(self) -> str:
        """``instant``."""
        return "instant"

    async def start(self, sink: OutputSink) -> None:
        """Remember where output goes."""
        self._sink = sink

    async def run(self) -> None:
        """Finish every pending request in one batch (one "iteration"), until cancelled.

        Requests that arrived together finish together, as those of one engine step do, so
        the worker reports them in one ``request.done`` event.
        """
        if self._sink is None:
            raise RuntimeError("InstantBackend.run called before start")
        while True:
            await self._work.wait()
            self._work.clear()
            if not self._pending:
                continue
            pending, self._pending = self._pending, {}
            emitted = tuple(rid for rid, tokens in pending.items() for _ in range(tokens))
            await self._sink.on_output(
                OutputBatch(emitted=emitted, finished=tuple(pending), at=time.time())
            )

    def submit(self, request: ClassifiedRequest) -> None:
        """Queue a request; it will produce exactly ``max_tokens`` tokens."""
        self._pending[request.request.request_id] = request.request.max_tokens
        self._work.set()

    def abort(self, request_id: str) -> None:
        """Forget a request not yet finished."""
        self._pending.pop(request_id, None)

    async def set_clock(self, mhz: float) -> ClockOutcome:
        """Record the clock (nothing to snap it to)."""
        self._clock_mhz = mhz
        return ClockOutcome(applied_mhz=mhz, accepted=True)

    async def refresh(self) -> None:
        """Nothing to fetch."""

    def snapshot(self) -> BackendSnapshot:
        """Queued requests count as running; no KV, power or energy."""
        return BackendSnapshot(
            gpu=self._gpu,
            model=self._model,
            tp=self._tp,
            running=len(self._pending),
            waiting=0,
            kv_blocks_used=0,
            kv_blocks_total=0,
            kv_block_size=16,
            clock_mhz=self._clock_mhz,
            power_w=0.0,
            energy_j=0.0,
        )

    async def close(self) -> None:
        """Nothing to release."""
