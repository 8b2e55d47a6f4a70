"""Per-request output bookkeeping of a worker: coalesced token chunks and completion facts.

Pure: the shell feeds it engine iterations with wall timestamps and publishes what it
returns. The first token of a request is flushed at once (TTFT must not wait for the
coalescing window); later tokens are sent when the window closes or the request ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from proto.messages import ClassifiedRequest, Completion, TokenChunk, client_request_id
from shared.metrics.energy import JOULES_PER_KWH

__all__ = ["RequestStream", "StreamBook"]


@dataclass(slots=True)
class RequestStream:
    """Output state of one request on this worker."""

    request: ClassifiedRequest
    accepted_at: float
    produced: int = 0
    sent: int = 0
    first_token_at: float = 0.0
    pending: list[float] = field(default_factory=list)
    pending_since: float = 0.0
    energy_j: float = 0.0
    preemptions: int = 0


class StreamBook:
    """All requests in flight on one worker."""

    def __init__(self, worker_id: str, flush_s: float, *, gpu: str = "", tp: int = 0) -> None:
        self._worker_id = worker_id
        self._flush_s = flush_s
        self._gpu = gpu
        self._tp = tp
        self._streams: dict[str, RequestStream] = {}
        self.intensity_g_per_kwh: float | None = None
        """The worker region's carbon intensity now (set by the stats heartbeat): a finished
        request's CO2 is its energy at this intensity."""

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._streams

    def __len__(self) -> int:
        return len(self._streams)

    def open(self, request: ClassifiedRequest, accepted_at: float) -> None:
        """Start tracking an accepted request."""
        self._streams[request.request.request_id] = RequestStream(request, accepted_at)

    def requests(self) -> list[ClassifiedRequest]:
        """Requests still in flight."""
        return [s.request for s in self._streams.values()]

    def streams(self) -> list[RequestStream]:
        """Every request in flight with its output state (for the instance state)."""
        return list(self._streams.values())

    def drop(self, request_id: str) -> RequestStream | None:
        """Stop tracking a request."""
        return self._streams.pop(request_id, None)

    def on_iteration(
        self,
        emitted: tuple[str, ...],
        finished: tuple[str, ...],
        preempted: tuple[str, ...],
        energy_j: float,
        at: float,
        finish_reasons: Mapping[str, str] | None = None,
    ) -> tuple[list[tuple[str, TokenChunk]], list[tuple[str, Completion]]]:
        """Account one iteration; return (reply subject, chunk) and (reply subject, completion).

        A request id repeats in ``emitted`` when it produced several tokens at once;
        ``finish_reasons`` says why finished requests ended (``length`` by default).
        """
        chunks: list[tuple[str, TokenChunk]] = []
        completions: list[tuple[str, Completion]] = []
        share = energy_j / len(emitted) if emitted else 0.0
        for rid in preempted:
            stream = self._streams.get(rid)
            if stream is not None:
                stream.preemptions += 1
        for rid in emitted:
            stream = self._streams.get(rid)
            if stream is None:
                continue
            stream.energy_j += share
            if stream.produced == 0:
                stream.first_token_at = at
            stream.produced += 1
            if not stream.pending:
                stream.pending_since = at
            stream.pending.append(at)
        finished_set = set(finished)
        for rid in emitted:
            stream = self._streams.get(rid)
            if stream is None or not stream.pending:
                continue
            first = stream.sent == 0
            if first or rid in finished_set or at - stream.pending_since >= self._flush_s:
                chunks.append((stream.request.request.reply_subject, self._take(stream)))
        for rid in finished:
            stream = self._streams.pop(rid, None)
            if stream is None:
                continue
            if stream.pending:
                chunks.append((stream.request.request.reply_subject, self._take(stream)))
            reason = (finish_reasons or {}).get(rid, "length")
            completions.append(
                (stream.request.request.reply_subject, self._complete(stream, at, reason))
            )
        return chunks, completions

    def flush_due(self, at: float) -> list[tuple[str, TokenChunk]]:
        """Chunks whose coalescing window has closed by ``at``."""
        out: list[tuple[str, TokenChunk]] = []
        for stream in self._streams.values():
            if stream.pending and at - stream.pending_since >= self._flush_s:
                out.append((stream.request.request.reply_subject, self._take(stream)))
        return out

    def _take(self, stream: RequestStream) -> TokenChunk:
        chunk = TokenChunk(  # only ever sent to the client: its own id
            request_id=client_request_id(stream.request.request.request_id),
            worker_id=self._worker_id,
            first_index=stream.sent,
            token_times=stream.pending,
        )
        stream.sent += len(stream.pending)
        stream.pending = []
        return chunk

    def _complete(self, stream: RequestStream, at: float, finish_reason: str) -> Completion:
        req = stream.request
        return Completion(
            request_id=req.request.request_id,
            worker_id=self._worker_id,
            pool_id=req.pool_id,
            region=req.region,
            request_class=req.request_class,
            input_tokens=req.input_tokens,
            output_tokens=stream.produced,
            sent_at=req.request.sent_at,
            accepted_at=stream.accepted_at,
            first_token_at=stream.first_token_at,
            finished_at=at,
            energy_j=stream.energy_j,
            preemptions=stream.preemptions,
            finish_reason=finish_reason,
            predicted_output_tokens=req.predicted_output_tokens,
            lat_s=req.lat_s,
            profile_ttft_ms=req.profile_ttft_ms,
            profile_tbt_ms=req.profile_tbt_ms,
            model=req.request.model,
            gpu=self._gpu,
            tp=self._tp,
            co2_g=None
            if self.intensity_g_per_kwh is None
            else stream.energy_j / JOULES_PER_KWH * self.intensity_g_per_kwh,
        )
