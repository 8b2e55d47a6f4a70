"""Shared helpers of the worker unit tests: a classified request and a recording sink."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from proto.messages import ClassifiedRequest, Request
from services.worker.backend import OutputBatch

__all__ = ["RecordingSink", "classified"]


def classified(
    rid: str, *, prompt_tokens: int = 10, max_tokens: int = 5, prompt: str | None = None
) -> ClassifiedRequest:
    """A classified request with the given sizes."""
    req = Request(
        request_id=rid,
        model="llama-3-8b",
        reply_subject=f"reply.{rid}",
        sent_at=0.0,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
        prompt=prompt,
    )
    return ClassifiedRequest(
        request=req,
        input_tokens=prompt_tokens,
        predicted_output_tokens=max_tokens,
        request_class="SS",
        pool_id="p",
        region="PJM",
        arrival_s=0.0,
        ttft_slo_ms=250.0,
        tbt_slo_ms=100.0,
        profile_ttft_ms=50.0,
        profile_tbt_ms=10.0,
        lat_s=1.0,
        deadline_s=1.4,
        classified_at=0.0,
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
