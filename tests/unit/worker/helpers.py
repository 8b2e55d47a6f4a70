"""Shared helpers of the worker unit tests: a classified request and a recording sink."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from proto.messages import ClassifiedRequest
from services.worker.backend import OutputBatch
from services.worker.vllm_backend import VllmBackend
from tests.factories import classified_request

__all__ = ["RecordingSink", "classified"]


def classified(
    rid: str, *, prompt_tokens: int = 10, max_tokens: int = 5, prompt: str | None = None
) -> ClassifiedRequest:
    """A classified request with the given sizes."""
    return classified_request(
        rid, prompt_tokens=prompt_tokens, output_tokens=max_tokens, prompt=prompt
    )


@dataclass
class RecordingSink:
    """Collects what a backend reports; ``ended`` is set when ``expected`` requests ended."""

    expected: int = 1
    batches: list[OutputBatch] = field(default_factory=list)
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_output(self, batch: OutputBatch) -> None:
        """Record a batch."""
        self.batches.append(batch)
        self._check()

    async def on_failure(self, request_id: str, code: str, reason: str) -> None:
        """Record a failure."""
        self.failures.append((request_id, code, reason))
        self._check()

    def _check(self) -> None:
        if len(self.finished()) + len(self.failures) >= self.expected:
            self.ended.set()

    def tokens(self, rid: str) -> int:
        """Tokens reported for ``rid``."""
        return sum(b.emitted.count(rid) for b in self.batches)

    def finished(self) -> list[str]:
        """Finished request ids, in order."""
        return [rid for b in self.batches for rid in b.finished]

    def energy_j(self) -> float:
        """Energy reported in all batches."""
        return sum(b.energy_j for b in self.batches)


@contextlib.asynccontextmanager
async def backend_on(
    url: str, sink: RecordingSink, *, model: str = "llama-3-8b"
) -> AsyncIterator[VllmBackend]:
    """A started vllm backend on the server at ``url``, running for the block."""
    backend = VllmBackend(url, gpu="A100-80GB", model=model, tp=1)
    await backend.start(sink)
    task = asyncio.create_task(backend.run())
    try:
        yield backend
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await backend.close()
