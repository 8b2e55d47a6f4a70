"""Replay a trace onto the ingress stream and record what comes back.

Requests are published to JetStream at ``t / speedup`` wall seconds after the start, on the
replayer's own ingress subject ``ingress.client.<client id>``: on a secured stack the client
id is the NATS user (``loadgen``), the only one the server lets it publish and read as. The
``Nats-Msg-Id`` is ``<client id>.<request id>``: a retried publish is not a second request,
and another client's equal id is no duplicate. Every chunk, completion and error addressed
to this client is recorded; token indices deduplicate chunks a restarted worker may send
twice. A request with neither a completion nor an error when the replay settles is *lost*.

A publish the stream does not ack (a NATS restart) is retried with the same payload and
``Nats-Msg-Id`` (:func:`publish_with_retry`): server-side de-duplication makes that safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from loadgen.traces import TraceRequest
from proto.codec import DecodeError, decode_any, encode
from proto.messages import (
    Completion,
    ErrorReply,
    Request,
    TokenChunk,
    WorkerStats,
    scoped_request_id,
)
from proto.subjects import Subjects
from shared.bus import HOPS_HEADER, parse_hops
from shared.loops import retry, wait_event
from shared.resends import resend_after_reconnects
from shared.security.client_ids import instance_token, pick_client_id
from shared.telemetry import inject_headers

__all__ = [
    "PUBLISH_RETRY_S",
    "ClientRecord",
    "ReplayResult",
    "WorkerEnergy",
    "publish_with_retry",
    "replay",
    "replay_parts",
]

REPLY_HEADER = "Gs-Reply"


@dataclass(slots=True)
class ClientRecord:
    """What the client saw of one request (wall-clock seconds)."""

    request_id: str
    trace: TraceRequest
    sent_at: float = 0.0
    token_times: dict[int, float] = field(default_factory=dict)
    completion: Completion | None = None
    error: ErrorReply | None = None
    duplicate_endings: int = 0
    """Endings after the first that differ from it (a request answered twice); a repeat
    of the same message (re-sent after an outage) is not one."""
    ended_at: float = 0.0
    """Wall time the completion or error reached the client."""
    hops: dict[str, float] = field(default_factory=dict)
    """With ``hops``: wall stamps by hop (``pub``, ``ack``, ``fetch`` … ``done``, ``recv``)."""
    publish_attempts: int = 0
    """Publishes of this request until the stream acked it (more than 1: retried)."""
    model: str = ""
    """The model it asked for."""

    @property
    def ended(self) -> bool:
        """Whether a completion or an error arrived."""
        return self.completion is not None or self.error is not None


@dataclass(slots=True)
class WorkerEnergy:
    """First and last energy counter seen from one worker, with its samples."""

    region: str
    samples: list[tuple[float, float]] = field(default_factory=list)
    """(wall time, cumulative energy J)."""


@dataclass(slots=True)
class ReplayResult:
    """Everything a replay observed."""

    records: list[ClientRecord]
    workers: dict[str, WorkerEnergy]
    started_at: float
    finished_at: float
    speedup: float


PUBLISH_RETRY_S = 30.0
"""Default time to keep retrying one publish (a NATS restart takes a few seconds)."""
PUBLISH_TIMEOUT_S = 2.0
"""Wait for the stream's ack of one publish attempt."""
RETRYABLE_PUBLISH_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,  # also nats.errors.TimeoutError
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.NoStreamResponseError,  # the stream is not back yet after a restart
    nats.js.errors.ServiceUnavailableError,
)
"""Failures after which the stream may or may not hold the message: publish again."""

logger = logging.getLogger(__name__)


async def publish_with_retry(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    headers: dict[str, str],
    record: ClientRecord,
    budget_s: float = PUBLISH_RETRY_S,
) -> bool:
    """Publish until the stream acks, with the same payload and ``Nats-Msg-Id`` each time.

    A timed-out publish may have been stored (only the ack was lost, e.g. while nats-server
    restarts), so a retry is safe only because it is the *same* message: JetStream drops
    a repeat of the ``Nats-Msg-Id`` within its duplicate window, and should the stream hold
    both copies anyway, the scheduler's seen-mark finds the same request under the same id
    and drops the second silently (``docs/protocol.md``). Returns False after ``budget_s``.
    """

    async def publish() -> None:
        record.publish_attempts += 1
        await js.publish(subject, payload, headers=headers, timeout=PUBLISH_TIMEOUT_S)

    try:
        await retry(
            publish,
            RETRYABLE_PUBLISH_ERRORS,
            within_s=budget_s,
            first_backoff_s=0.05,
            max_backoff_s=1.0,
        )
    except RETRYABLE_PUBLISH_ERRORS as exc:
        logger.warning(
            "giving up on %s after %d publishes: %r",
            record.request_id,
            record.publish_attempts,
            exc,
        )
        return False
    return True


async def replay(
    nc: Client,
    subjects: Subjects,
    trace: Sequence[TraceRequest],
    *,
    model: str | Sequence[str],
    speedup: float,
    settle_timeout_s: float = 30.0,
    on_progress: Callable[[int, int], None] | None = None,
    client_id: str | None = None,
    hops: bool = False,
    publish_retry_s: float = PUBLISH_RETRY_S,
) -> ReplayResult:
    """Publish ``trace`` in (sped-up) real time and wait until every request ends or settles.

    Args:
        nc: a connected NATS client.
        subjects: the stack's subjects.
        trace: requests with arrival offsets in model seconds.
        model: model name to request, or several: request ``i`` asks for the ``i mod M``-th.
        speedup: model seconds per wall second.
        settle_timeout_s: after the last publish, wait at most this long (wall) without any
            request ending before declaring the rest lost.
        on_progress: called with (ended, total) as requests end.
        client_id: the client id to publish and read as; default: the user the connection
            authenticated as (its bound id on a secured stack), else a random ``lg-`` id.
        hops: ask every hop for a wall stamp (:data:`shared.bus.HOPS_HEADER`); they land
            in :attr:`ClientRecord.hops`.
        publish_retry_s: how long to keep retrying a publish the stream did not ack
            (:func:`publish_with_retry`); a request given up on counts as lost.
    """
    js = nc.jetstream()
    client_id = pick_client_id(nc, client_id, "lg")
    # Concurrent replays may share a bound client id; the run token keeps their ids apart.
    run = f"{client_id[:64]}-{instance_token()}"
    models = (model,) if isinstance(model, str) else tuple(model)
    if not models:
        raise ValueError("replay needs at least one model")
    records = [
        ClientRecord(f"{run}-{i}", tr, model=models[i % len(models)]) for i, tr in enumerate(trace)
    ]
    by_id = {r.request_id: r for r in records}
    workers: dict[str, WorkerEnergy] = {}
    ended = 0
    progress = asyncio.Event()

    async def on_reply(msg: Msg) -> None:
        nonlocal ended
        try:
            message = decode_any(msg.data)
        except DecodeError:
            return
        rid = getattr(message, "request_id", None)
        record = by_id.get(rid) if isinstance(rid, str) else None
        if record is None:
            return
        if isinstance(message, TokenChunk):
            for k, at in enumerate(message.token_times):
                record.token_times.setdefault(message.first_index + k, at)
        elif isinstance(message, Completion | ErrorReply):
            if record.ended:
                if message in (record.completion, record.error):
                    return  # the same answer again (a worker re-sends after a NATS outage)
                record.duplicate_endings += 1
                return
            record.ended_at = time.time()
            if isinstance(message, Completion):
                record.completion = message
                if hops and msg.headers and HOPS_HEADER in msg.headers:
                    record.hops.update(parse_hops(msg.headers[HOPS_HEADER]))
                    record.hops["recv"] = record.ended_at
            else:
                record.error = message
            ended += 1
            progress.set()
            if on_progress is not None:
                on_progress(ended, len(records))

    async def on_stats(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            message = decode_any(msg.data)
            if isinstance(message, WorkerStats):
                entry = workers.setdefault(message.worker_id, WorkerEnergy(message.region))
                entry.samples.append((message.at, message.energy_j))

    subs = [
        await nc.subscribe(subjects.client_wildcard(client_id), cb=on_reply),
        await nc.subscribe(subjects.worker_stats_wildcard, cb=on_stats),
    ]
    started = time.time()
    pending: set[asyncio.Task[None]] = set()
    # After a reconnect to another node, what was published meanwhile is gone: ask the
    # workers for the endings of the requests still unanswered (shared/resends.py).
    asker = asyncio.create_task(
        resend_after_reconnects(
            nc,
            subjects,
            client_id,
            lambda: [r.request_id for r in records if r.sent_at and not r.ended],
        )
    )

    async def publish(record: ClientRecord) -> None:
        record.sent_at = time.time()
        reply = subjects.client_reply(client_id, record.request_id)
        req = Request(
            request_id=record.request_id,
            model=record.model,
            reply_subject=reply,
            sent_at=record.sent_at,
            max_tokens=record.trace.output_tokens,
            prompt_tokens=record.trace.prompt_tokens,
            client_id=client_id,
        )
        # The stream's de-duplication window spans all clients: scope the id like the stack.
        msg_id = scoped_request_id(client_id, record.request_id)
        headers = inject_headers({"Nats-Msg-Id": msg_id, REPLY_HEADER: reply})
        if hops:
            headers[HOPS_HEADER] = "1"
        stored = await publish_with_retry(
            js, subjects.ingress_client(client_id), encode(req), headers, record, publish_retry_s
        )
        if not stored:
            return  # never reached the stream: it will count as lost
        if hops:
            record.hops["pub"] = record.sent_at
            record.hops["ack"] = time.time()

    try:
        for record in records:
            delay = started + record.trace.t_s / speedup - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(publish(record))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending)
        while ended < len(records):
            progress.clear()
            if not await wait_event(progress, settle_timeout_s):
                break
        await asyncio.sleep(0.2)  # late chunks and a last stats sample
    finally:
        asker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asker
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
    return ReplayResult(records, workers, started, time.time(), speedup)


async def replay_parts(
    nc: Client,
    parts: Sequence[tuple[str, Sequence[TraceRequest]]],
    *,
    model: str | Sequence[str],
    settle_timeout_s: float,
    hops: bool = False,
) -> list[ClientRecord]:
    """:func:`replay` every ``(namespace, requests)`` part at once on one connection, in
    real time (speed-up 1), as one client sends to several stacks (cells); every record."""
    results = await asyncio.gather(
        *(
            replay(
                nc,
                Subjects(namespace),
                requests,
                model=model,
                speedup=1.0,
                settle_timeout_s=settle_timeout_s,
                hops=hops,
            )
            for namespace, requests in parts
            if requests
        )
    )
    return [record for result in results for record in result.records]
