"""Ending a request well: its completion to the client and ``request.done``, once and again.

A finished request's :class:`~proto.messages.Completion` goes to its client (under the
client's own request id, with the hop stamps it asked for) and to the worker's
``request.done`` subject, one :class:`~proto.messages.CompletionBatch` per engine
iteration when several end together, so the bookkeeping subscribers decode one message.
Its TTFT and E2E are observed per class and its ``generate`` span is recorded as a child
of the dispatch span. The last :data:`FINISHED_MEMORY` completions are remembered: a
dispatch repeated because its reply was lost (a NATS restart) is answered with the same
completion instead of a second run.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import trace
from prometheus_client import Histogram

from proto.codec import encode
from proto.messages import ClassifiedRequest, Completion, CompletionBatch, client_request_id
from services.worker.ended_log import EndedLog
from services.worker.publisher import ReplyPublisher
from shared.bus import HOPS_HEADER, HOPS_KEY, tracing_active
from shared.counters import COMPLETIONS, REQUEST_LATENCY_S
from shared.lifecycle import ServiceContext
from shared.telemetry import extract_context, request_attributes

__all__ = ["DONE_BATCH_MAX", "FINISHED_MEMORY", "CompletionSender"]

DONE_BATCH_MAX = 4096
"""Most completions in one ``request.done`` event (the message's own limit)."""
FINISHED_MEMORY = 4096
"""Finished requests a worker remembers, to answer a repeated dispatch without a rerun."""


class CompletionSender:
    """Sends the completions of one worker and remembers what each request needs at its end."""

    def __init__(
        self,
        ctx: ServiceContext,
        publisher: ReplyPublisher,
        ended_log: EndedLog,
        done_subject: str,
    ) -> None:
        self._ctx = ctx
        self._publisher = publisher
        self._ended_log = ended_log
        self._done_subject = done_subject
        self._trace_parents: dict[str, tuple[otel_context.Context, int]] = {}
        """The generate span's parent context and start (ns) of each traced request."""
        self._latency_by_class: dict[str, tuple[Histogram, Histogram]] = {}
        self._hops: dict[str, str] = {}
        """Hop stamps of requests in flight that asked for them (bench ``--hops``)."""
        worker = ctx.settings.worker
        self._completed = COMPLETIONS.labels(worker.worker_id, worker.model)
        self._finished: OrderedDict[str, tuple[str, bytes, bytes]] = OrderedDict()
        """Recently finished requests: reply subject, client's and request.done's copy of
        the completion, so a repeated dispatch is answered without a second run."""

    def opened(self, req: ClassifiedRequest) -> None:
        """Remember what an accepted request's completion carries: hop stamps, trace parent."""
        rid = req.request.request_id
        # --- opt-in hop stamps (bench --hops): echoed on the completion ---
        if HOPS_KEY in req.trace:
            self._hops[rid] = req.trace[HOPS_KEY]
        # --- end hop stamps ---
        # The generate span is recorded at completion, as a child of this dispatch span;
        # with tracing off and no trace coming in there is nothing to record.
        if tracing_active(req.trace):
            parent = otel_context.get_current()
            if not trace.get_current_span(parent).get_span_context().is_valid:
                # Dispatched in a batch: no span of its own here, so the request's trace.
                parent = extract_context(req.trace)
            if trace.get_current_span(parent).get_span_context().is_valid:
                self._trace_parents[rid] = (parent, time.time_ns())

    def forget(self, request_id: str) -> None:
        """A request ends without a completion (a hand-back): drop what was kept."""
        self._trace_parents.pop(request_id, None)
        self._hops.pop(request_id, None)

    def failed(self, request_id: str, code: str, reason: str) -> None:
        """A request ends here with an error (cancelled, the backend failed): its generate
        span is recorded failed, with the code and reason; then it is forgotten."""
        kept = self._trace_parents.get(request_id)
        self.forget(request_id)
        if kept is None:
            return
        parent, started_ns = kept
        span = self._ctx.tracer.start_span(
            "generate",
            context=parent,
            start_time=started_ns,
            attributes={**request_attributes(request_id), "error.type": code},
        )
        span.set_status(trace.StatusCode.ERROR, f"{code}: {reason}")
        span.end()

    async def send_to_client_again(self, request_id: str) -> bool:
        """Send a recent ending's client copy again (its client asked: it may have missed
        it while moving to another NATS node); whether this worker had it."""
        finished = self._finished.get(request_id)
        if finished is None:
            return False
        subject, to_client, _ = finished
        await self._publisher.publish(subject, to_client)
        return True

    def forget_finished(self, request_ids: Iterable[str]) -> None:
        """Forget the endings of requests the router revoked from this worker: their
        answers come from the worker that ran them again, never from here."""
        for rid in request_ids:
            self._finished.pop(rid, None)

    def finished(self, request_id: str) -> bool:
        """Whether this request finished here recently (:meth:`send_again` can end it)."""
        return request_id in self._finished

    async def send_again(self, request_id: str) -> bool:
        """End a request that finished here again, with the same completion; whether it had.

        Its dispatch reply was lost (a NATS restart) and the router sent it again: the
        client drops the repeat; request.done frees the router's slot.
        """
        finished = self._finished.get(request_id)
        if finished is None:
            return False
        subject, to_client, payload = finished
        await self._publisher.reply(subject, to_client)
        await self._publisher.publish(self._done_subject, payload)
        return True

    async def send(self, completions: Sequence[tuple[str, Completion]]) -> None:
        """Send an engine iteration's completions (reply subject, completion) everywhere."""
        for subject, done in completions:
            self._record(done)
            payload = encode(done)
            # The client gets its own request id; the bookkeeping the stack-wide scoped one.
            own_id = client_request_id(done.request_id)
            to_client = (
                payload
                if own_id == done.request_id
                else encode(msgspec.structs.replace(done, request_id=own_id))
            )
            # --- opt-in hop stamps: the client reads them from the completion's headers ---
            hops = self._hops.pop(done.request_id, None) if self._hops else None
            headers = {HOPS_HEADER: f"{hops},done={time.time():.6f}"} if hops else None
            # --- end hop stamps ---
            await self._publisher.reply(subject, to_client, headers)
            self._finished[done.request_id] = (subject, to_client, payload)
            while len(self._finished) > FINISHED_MEMORY:
                self._finished.popitem(last=False)
        if completions:
            self._completed.inc(len(completions))
            self._ended_log.add(done.request_id for _, done in completions)
        if len(completions) == 1:
            await self._publisher.publish(self._done_subject, self._finished[done.request_id][2])
        elif completions:
            # One event for the iteration: the bookkeeping subscribers (request path, dvfs
            # agent, planner) decode one message instead of one per finished request.
            for start in range(0, len(completions), DONE_BATCH_MAX):
                part = completions[start : start + DONE_BATCH_MAX]
                event = CompletionBatch(completions=[done for _, done in part])
                await self._publisher.publish(self._done_subject, encode(event))

    def _record(self, done: Completion) -> None:
        ttft, e2e = self._latency_children(done.request_class)
        ttft.observe(done.first_token_at - done.sent_at)
        e2e.observe(done.finished_at - done.sent_at)
        kept = self._trace_parents.pop(done.request_id, None)
        if kept is None:  # dispatched untraced with tracing off (see opened)
            return
        span = self._ctx.tracer.start_span(
            "generate",
            context=kept[0],
            start_time=int(done.accepted_at * 1e9),
            attributes={
                **request_attributes(done.request_id),
                "gen_ai.usage.input_tokens": done.input_tokens,
                "gen_ai.usage.output_tokens": done.output_tokens,
                "greenserve.energy_j": done.energy_j,
            },
        )
        span.end(end_time=int(done.finished_at * 1e9))

    def _latency_children(self, request_class: str) -> tuple[Histogram, Histogram]:
        """The TTFT and E2E histograms of a class (``labels`` costs a lookup per call)."""
        children = self._latency_by_class.get(request_class)
        if children is None:
            children = (
                REQUEST_LATENCY_S.labels("ttft", request_class),
                REQUEST_LATENCY_S.labels("e2e", request_class),
            )
            self._latency_by_class[request_class] = children
        return children
