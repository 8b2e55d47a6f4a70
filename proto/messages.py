"""Message types of protocol v1, as msgspec Structs encoded with MessagePack.

Why msgspec rather than ``msgpack``: one declaration gives the schema, the encoder and a
*validating* decoder (types, ranges, required fields) in C, so validation at the boundary
costs nothing extra; ``tools/bench_codec.py`` measures it against msgpack + manual checks.

Every struct is tagged (``type`` field on the wire) so a decoder can tell message kinds
apart and a mis-addressed message fails validation instead of being misread. Times are
wall-clock epoch seconds (``*_at``) unless named ``*_s`` (model seconds) or ``*_ms``.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec
from msgspec import Meta, Struct

__all__ = [
    "MAX_RESEND_IDS",
    "MAX_STOP_LENGTH",
    "MAX_STOP_SEQUENCES",
    "MAX_TOKENS_LIMIT",
    "UNPLACED_WORKER",
    "Assignment",
    "CancelRequest",
    "ClassifiedRequest",
    "ClockCommand",
    "ClockOverride",
    "ClockReply",
    "Completion",
    "CompletionBatch",
    "DispatchBatch",
    "DispatchBatchReply",
    "DispatchReply",
    "DvfsReport",
    "ErrorReply",
    "Forecast",
    "GpuReport",
    "InstanceState",
    "Plan",
    "PoolPlan",
    "PullReply",
    "PullRequest",
    "Request",
    "RequestId",
    "RequestProgress",
    "RequeueRequest",
    "ResendRequest",
    "RouteWeight",
    "Sampling",
    "SubmitBatch",
    "SubmitBatchReply",
    "SubmitReply",
    "TokenChunk",
    "WorkerStats",
    "client_request_id",
    "scoped_request_id",
]

MAX_TOKENS_LIMIT: Final = 1 << 20
"""No model we serve has a context beyond a million tokens; larger counts are malformed."""

# \Z, not $: "$" also matches before a trailing newline, which would end a NATS line.
Id = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_-]{1,128}\Z")]
RequestId = Annotated[str, Meta(pattern=r"^(?:[A-Za-z0-9_-]{1,128}\.)?[A-Za-z0-9_-]{1,128}\Z")]
"""A request id: what the client chose (one token), or inside the stack, after the
classifier bound it to the client's ingress subject, ``<client id>.<client's id>``
(:func:`scoped_request_id`), so two clients' equal ids stay two requests. Replies to a
client carry its own id again (:func:`client_request_id`)."""
Subject = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\Z", max_length=512)]
"""A concrete subject: dot-separated tokens, no wildcards, spaces or control characters."""
FINITE_LIMIT: Final = 1e18
Finite = Annotated[float, Meta(ge=-FINITE_LIMIT, le=FINITE_LIMIT)]
"""Any real number; the bounds also refuse NaN and infinities."""
TokenCount = Annotated[int, Meta(ge=1, le=MAX_TOKENS_LIMIT)]
NonNegInt = Annotated[int, Meta(ge=0)]
NonNeg = Annotated[float, Meta(ge=0.0, le=FINITE_LIMIT)]
Mhz = Annotated[float, Meta(ge=0.0, le=5000.0)]
ModelName = Annotated[str, Meta(min_length=1, max_length=128)]
"""A served model's name, as clients ask for it (``llama-3-8b``)."""


def scoped_request_id(client_id: str, request_id: str) -> str:
    """The stack-wide id of client ``client_id``'s request ``request_id``.

    Client ids are subject tokens (no ``.``), so the first ``.`` always ends the client id
    and two clients' ids can never meet, whatever characters they use.
    """
    return f"{client_id}.{request_id}"


def client_request_id(request_id: str) -> str:
    """The id the client chose (what replies to the client carry): after its client id."""
    return request_id.rpartition(".")[2]


class _Message(Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=False):
    """Base of every message: tagged, immutable, keyword-only."""


MAX_STOP_SEQUENCES: Final = 4
"""OpenAI's limit on stop sequences per request."""
MAX_STOP_LENGTH: Final = 512
"""Longest stop sequence in characters: far beyond any real one, it bounds the message."""
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
StopSequence = Annotated[str, Meta(min_length=1, max_length=MAX_STOP_LENGTH)]


class Sampling(_Message, tag="gs.v1.sampling", frozen=True, kw_only=True, omit_defaults=True):
    """A client's sampling parameters, as OpenAI names and bounds them; only a real engine
    applies them (the simulated one models timing alone).

    Every field is optional and ``None`` means the engine's default. Unset fields are not
    written (``omit_defaults``), so the struct costs only what the client set.
    """

    temperature: Annotated[float, Meta(ge=0.0, le=2.0)] | None = None
    """``None``: greedy (``0``) on a vLLM worker, which trace replay relies on."""
    top_p: Annotated[float, Meta(gt=0.0, le=1.0)] | None = None
    """Nucleus sampling: draw from the smallest set of tokens holding this probability."""
    stop: (
        Annotated[list[StopSequence], Meta(min_length=1, max_length=MAX_STOP_SEQUENCES)] | None
    ) = None
    """1 to 4 texts (each of 1 to 512 characters) that end generation when produced; the
    match is left out of the output and the finish reason is ``stop``."""
    seed: Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)] | None = None
    """Seed of this request's sampler (an int64, as vLLM takes it): reproducible draws."""
    presence_penalty: Penalty | None = None
    """Lowers the logit of every token already in the output by this much, once."""
    frequency_penalty: Penalty | None = None
    """Lowers the logit of a token by this much per time it is already in the output."""


class Request(_Message, tag="gs.v1.request", frozen=True, kw_only=True):
    """A client's inference request, as published on the ingress subject."""

    request_id: RequestId
    model: ModelName
    reply_subject: Subject
    sent_at: NonNeg
    max_tokens: TokenCount
    """Most output tokens; with ``ignore_eos`` the exact number generated (trace replay)."""
    prompt_tokens: TokenCount | None = None
    """Input length when the client knows it (trace replay); else ``prompt`` is tokenised."""
    prompt: Annotated[str, Meta(max_length=4_000_000)] | None = None
    ignore_eos: bool = True
    stream: bool = True
    client_id: Id | None = None
    """The sender; on ``ingress.client.<id>`` the classifier requires ``<id>`` (or fills it in)."""
    sampling: Sampling | None = None
    """The client's sampling parameters; ``None`` (and from senders that predate the field):
    the engine's defaults."""


class ClassifiedRequest(_Message, tag="gs.v1.classified", frozen=True, kw_only=True):
    """A request after classification: sizes, class, deadlines and its pool."""

    request: Request
    input_tokens: TokenCount
    predicted_output_tokens: TokenCount
    request_class: Annotated[str, Meta(min_length=1, max_length=16)]
    pool_id: Id
    region: Id
    arrival_s: Finite
    """Model time of arrival (the scheduler's clock)."""
    ttft_slo_ms: NonNeg
    tbt_slo_ms: NonNeg
    profile_ttft_ms: NonNeg
    """No-queue TTFT of the pool's configuration (from its profile)."""
    profile_tbt_ms: NonNeg
    """TBT of the pool's configuration (from its profile)."""
    lat_s: NonNeg
    """No-queue execution time estimate: N̂·TBT + TTFT (FREESH Eq. 6)."""
    deadline_s: Finite
    """Model time by which the request should finish (arrival + α_LLF·Lat)."""
    classified_at: NonNeg
    trace: dict[str, str] = msgspec.field(default_factory=dict)
    """W3C trace context of the classify span, so the trace survives the queue."""
    ingress_seq: NonNegInt = 0
    """Stream sequence of the ingress message (0: unknown). The scheduler's seen-mark keeps
    it, so a redelivery (same sequence) is told from a client reusing its id (another)."""


class SubmitBatch(_Message, tag="gs.v1.submit_batch", frozen=True, kw_only=True):
    """Classifier hands the requests of one ingress batch to the scheduler at once."""

    requests: Annotated[list[ClassifiedRequest], Meta(min_length=1, max_length=4096)]


class SubmitBatchReply(_Message, tag="gs.v1.submit_batch_reply", frozen=True, kw_only=True):
    """Ids the scheduler stored now and ids it already held (both may be acked)."""

    accepted: list[RequestId]
    duplicates: list[RequestId] = msgspec.field(default_factory=list)
    """Redeliveries of a request already stored (the same ingress message): ack them."""
    reused: list[NonNegInt] = msgspec.field(default_factory=list)
    """Ingress stream sequences of *new* messages whose request id their client had
    already used: not stored; the classifier answers ``duplicate_request_id``."""
    cancelled: list[RequestId] = msgspec.field(default_factory=list)
    """Requests their client cancelled before they were queued: not queued, already ended
    with ``cancelled`` (docs/protocol.md, Cancellation); ack them."""
    shed: list[RequestId] = msgspec.field(default_factory=list)
    """Requests whose pool's queue was full: not queued, already ended with
    ``overloaded`` (``scheduler.max_queued_per_pool``); ack them."""


class SubmitReply(_Message, tag="gs.v1.submit_reply", frozen=True, kw_only=True):
    """Scheduler's answer to a submit: accepted (stored) or a duplicate of a known id."""

    request_id: RequestId
    accepted: bool
    duplicate: bool = False


class PullRequest(_Message, tag="gs.v1.pull", frozen=True, kw_only=True):
    """Router asks the scheduler for up to ``slots`` admitted requests of one pool."""

    pool_id: Id
    slots: Annotated[int, Meta(ge=0, le=100_000)]
    router_id: Id


class PullReply(_Message, tag="gs.v1.pull_reply", frozen=True, kw_only=True):
    """Requests the scheduler admitted, best first by its queue discipline."""

    requests: list[ClassifiedRequest]
    queued: NonNegInt = 0


class RequeueRequest(_Message, tag="gs.v1.requeue", frozen=True, kw_only=True):
    """Router returns requests it could not place (workers vanished or refused)."""

    requests: list[ClassifiedRequest]


UNPLACED_WORKER: Final = "-"
"""``Assignment.worker_id`` of a request a router pulled but has not placed yet."""


class Assignment(_Message, tag="gs.v1.assignment", frozen=True, kw_only=True):
    """A request handed to a worker (kept in Redis until done, for recovery)."""

    request: ClassifiedRequest
    worker_id: Id
    dispatched_at: NonNeg


class DispatchReply(_Message, tag="gs.v1.dispatch_reply", frozen=True, kw_only=True):
    """Worker's answer to a dispatch."""

    request_id: RequestId
    worker_id: Id
    accepted: bool
    accepted_at: NonNeg
    reason: str = ""


class DispatchBatch(_Message, tag="gs.v1.dispatch_batch", frozen=True, kw_only=True):
    """Router hands one placement round's requests for one worker over at once."""

    requests: list[ClassifiedRequest]


class DispatchBatchReply(_Message, tag="gs.v1.dispatch_batch_reply", frozen=True, kw_only=True):
    """Worker's answers to a dispatch batch, one per request, in the batch's order."""

    replies: list[DispatchReply]


class TokenChunk(_Message, tag="gs.v1.chunk", frozen=True, kw_only=True):
    """Output tokens of one request; several tokens may be coalesced in one chunk."""

    request_id: RequestId
    worker_id: Id
    first_index: NonNegInt
    token_times: list[Finite]
    """Wall time each token was produced (the worker's clock)."""
    text: str | None = None


class Completion(_Message, tag="gs.v1.completion", frozen=True, kw_only=True):
    """A request finished: its sizes, timestamps and attributed energy."""

    request_id: RequestId
    worker_id: Id
    pool_id: Id
    region: Id
    request_class: str
    input_tokens: TokenCount
    output_tokens: NonNegInt
    sent_at: NonNeg
    accepted_at: NonNeg
    first_token_at: NonNeg
    finished_at: NonNeg
    energy_j: NonNeg
    """The request's share of its instance's energy (split by tokens per iteration)."""
    preemptions: NonNegInt = 0
    finish_reason: str = "length"
    predicted_output_tokens: NonNegInt = 0
    lat_s: NonNeg = 0.0
    """No-queue latency estimate the deadline was based on (violation window 5·Lat)."""
    profile_ttft_ms: NonNeg = 0.0
    """The serving pool's profiled no-queue TTFT (the classified request's), so a report can
    judge E2E against Lat of the true output length; 0 from senders that predate the field."""
    profile_tbt_ms: NonNeg = 0.0
    """The serving pool's profiled TBT, likewise."""
    co2_g: NonNeg | None = None
    """The request's CO2: ``energy_j`` at its worker region's carbon intensity when it
    finished (``None`` while the worker has no forecast for its region)."""
    model: Annotated[str, Meta(max_length=128)] = ""
    """The model that served it (the request's: a router places a request only on workers
    of its model); the planner counts demand per model by it. ``""`` from senders that
    predate the field."""
    gpu: Annotated[str, Meta(max_length=64)] = ""
    """GPU type of the worker that served it: with ``model`` and ``tp`` a report replays
    the request alone on that configuration for the yardstick its E2E is judged against
    (``shared.engine.unloaded``). ``""`` from senders that predate the field."""
    tp: Annotated[int, Meta(ge=0, le=64)] = 0
    """Tensor-parallel degree of that worker; 0 from senders that predate the field."""


class CompletionBatch(_Message, tag="gs.v1.completion_batch", frozen=True, kw_only=True):
    """Completions one worker iteration produced together, as one ``request.done`` event.

    Each client still gets its own :class:`Completion`; the bookkeeping subscribers get one
    message per iteration instead of one per request.
    """

    completions: Annotated[list[Completion], Meta(min_length=1, max_length=4096)]


class ErrorReply(_Message, tag="gs.v1.error", frozen=True, kw_only=True):
    """A clear, final error for one request (or a dead letter when the id is unknown)."""

    code: Annotated[str, Meta(min_length=1, max_length=64)]
    reason: Annotated[str, Meta(max_length=2048)]
    service: str
    request_id: RequestId | None = None
    at: NonNeg = 0.0


class CancelRequest(_Message, tag="gs.v1.cancel", frozen=True, kw_only=True):
    """A client no longer wants a request's answer: end it wherever it is, stop generating.

    Published on the client's own ``cancel.client.<client id>``; receivers scope the id
    with that subject's client id, never with the payload, so a client cancels only its own
    requests.
    """

    request_id: Id
    """The client's own id of the request (one token, as it sent it)."""
    reason: Annotated[str, Meta(max_length=256)] = ""
    """Why, for the logs (e.g. ``client disconnected``)."""
    at: NonNeg = 0.0


MAX_RESEND_IDS: Final = 1024
"""Most request ids in one :class:`ResendRequest` (a client with more sends several)."""


class ResendRequest(_Message, tag="gs.v1.resend", frozen=True, kw_only=True):
    """A client whose connection to NATS came back asks for the endings it may have missed.

    Published on the client's own ``resend.client.<client id>`` right after it reconnected
    (core NATS: what was published to it while it moved to another node is gone). Every
    worker sends again the completion it remembers of each named request (its last
    ``FINISHED_MEMORY``), to that request's reply subject; receivers scope the ids with the
    subject's client id, never with the payload, so a client gets only its own answers.
    """

    request_ids: Annotated[list[Id], Meta(max_length=MAX_RESEND_IDS)]
    """The client's own ids of its requests still unanswered."""
    at: NonNeg = 0.0


class WorkerStats(_Message, tag="gs.v1.worker_stats", frozen=True, kw_only=True):
    """A worker's state, published periodically and stored as its heartbeat."""

    worker_id: Id
    pool_id: Id
    region: Id
    node_id: Id
    gpu: str
    model: ModelName
    """The model the worker serves (its announcement): routers place on it only requests
    for this model, the gateway lists it, dvfs agents pick its profile by it."""
    tp: Annotated[int, Meta(ge=1, le=64)]
    running: NonNegInt
    waiting: NonNegInt
    max_num_seqs: NonNegInt
    """Sequences the worker takes now: its engine's limit, or its in-flight count while its
    admission gate is closed (so the router offers nothing more)."""
    free_slots: NonNegInt
    kv_blocks_used: NonNegInt
    kv_blocks_total: NonNegInt
    clock_mhz: Mhz
    power_w: NonNeg
    energy_j: NonNeg
    tokens_out: NonNegInt
    at: NonNeg
    backend: str = "sim"
    draining: bool = False
    kv_block_size: Annotated[int, Meta(ge=1)] = 16
    engine_max_num_seqs: NonNegInt = 0
    """The engine's configured batch limit, constant for the worker's life: what profiles and
    capacities are keyed by. 0 from senders that predate the field (see ``engine_limit``)."""
    started_at: NonNeg = 0.0
    """Wall time (the worker's clock) its process started: a later value under the same
    worker id is a restarted worker, which holds none of what the earlier one accepted.
    0 from senders that predate the field."""

    @property
    def engine_limit(self) -> int:
        """The engine's batch limit, not the gate-lowered ``max_num_seqs``."""
        return self.engine_max_num_seqs or self.max_num_seqs


class RequestProgress(_Message, tag="gs.v1.request_progress", frozen=True, kw_only=True):
    """One request in flight on a worker, as predictive clock control needs it."""

    request_id: RequestId
    prompt_tokens: TokenCount
    """Input length (throttLL'eM's |q_i|)."""
    generated_tokens: NonNegInt
    """Output tokens produced so far (0: still queued or prefilling)."""
    predicted_output_tokens: TokenCount
    """Predicted total output length (the classifier's r̂_i)."""
    max_tokens: TokenCount
    """The request's cap: where throttLL'eM moves a request that outgrew its prediction."""
    deadline_s: Finite
    """Model time by which the request should finish (the classifier's deadline)."""
    tbt_slo_s: NonNeg = 0.0
    """Its class's time-between-tokens SLO (0: unknown; the agent's own bound applies)."""


class InstanceState(_Message, tag="gs.v1.instance_state", frozen=True, kw_only=True):
    """A worker's running batch and queue, every dvfs period while ``dvfs.mode`` is predictive.

    The dvfs agent projects batch and KV from it (throttLL'eM Eq. 1–2) and picks the lowest
    clock meeting every deadline (Eq. 3–4); see ``docs/dvfs.md``.
    """

    worker_id: Id
    node_id: Id
    pool_id: Id
    now_s: Finite
    """Model time of the snapshot (the same clock as the deadlines)."""
    at: NonNeg
    clock_mhz: Mhz
    running: NonNegInt
    waiting: NonNegInt
    kv_blocks_used: NonNegInt
    kv_blocks_total: NonNegInt
    kv_block_size: Annotated[int, Meta(ge=1)] = 16
    requests: Annotated[list[RequestProgress], Meta(max_length=65536)] = msgspec.field(
        default_factory=list
    )
    """Every request the worker holds, running and queued."""


class RouteWeight(_Message, tag="gs.v1.route", frozen=True, kw_only=True):
    """Share of one request class sent to one pool."""

    pool_id: Id
    weight: NonNeg


class PoolPlan(_Message, tag="gs.v1.pool", frozen=True, kw_only=True):
    """One pool of the plan: where, on what, how many instances, at which clock."""

    pool_id: Id
    region: Id
    gpu: str
    tp: Annotated[int, Meta(ge=1, le=64)]
    instances: NonNegInt
    clock_mhz: Mhz | None = None
    classes: list[str] = msgspec.field(default_factory=list)
    ttft_ms: NonNeg = 0.0
    """Profiled no-queue TTFT of this pool's configuration (laxity input)."""
    tbt_ms: NonNeg = 0.0
    """Profiled TBT of this pool's configuration (laxity input)."""
    model: Annotated[str, Meta(max_length=128)] = ""
    """The model the pool's workers serve: the classifier routes a request only to pools of
    its model. ``""`` (plans of senders that predate the field): any model."""


class Plan(_Message, tag="gs.v1.plan", frozen=True, kw_only=True):
    """The planner's decision for one epoch."""

    epoch: NonNegInt
    issued_at: NonNeg
    valid_until: NonNeg
    scheme: str
    pools: list[PoolPlan]
    routes: dict[str, list[RouteWeight]]
    """Request class → pools and weights; class ``*`` is the default route."""
    objective: str = "static"
    status: str = "ok"


class Forecast(_Message, tag="gs.v1.forecast", frozen=True, kw_only=True):
    """Hourly carbon-intensity forecast of one region (gCO2/kWh)."""

    region: Id
    issued_at: NonNeg
    """When it was issued: the data's time in a replay, the wall clock live."""
    start_s: Finite
    """Model time (epoch seconds, UTC) of the first value."""
    step_s: Annotated[int, Meta(gt=0)]
    values: list[Finite]
    p10: list[Finite]
    p90: list[Finite]
    signal: str = "average"
    emission_factor: str = "direct"
    model: str = "history"
    mode: str = "replay"
    """``replay``: from the data files, ``issued_at`` and ``start_s`` in the data's time;
    ``live``: wall-clock time, from the zone's provider (services/forecaster/live.py)."""
    fallback: str = ""
    """Live mode: why the provider's data is not in this forecast (an outage), which is the
    model's own; empty when it is."""

    def value_at(self, t_s: float) -> float | None:
        """The value in force at model time ``t_s``: the first before the forecast starts,
        the last after it ends; ``None`` without values."""
        if not self.values:
            return None
        index = int((t_s - self.start_s) // self.step_s)
        return float(self.values[min(max(index, 0), len(self.values) - 1)])


class ClockCommand(_Message, tag="gs.v1.clock", frozen=True, kw_only=True):
    """Set a worker's GPU clock (all GPUs of the instance)."""

    worker_id: Id
    clock_mhz: Mhz
    issued_by: str
    reason: str = ""
    issued_at: NonNeg = 0.0


class ClockOverride(_Message, tag="gs.v1.clock_override", frozen=True, kw_only=True):
    """Hold a pool's GPUs (or one worker's) at their maximum clock for a bounded time.

    Sent by the scheduler's emergency ladder when an SLO miss is imminent (DynamoLLM §4.4,
    rung 2); dvfs agents honour it only from ``issued_by = "scheduler"``. ``hold_s`` 0
    releases the override at once.
    """

    pool_id: Id
    worker_id: Id | None = None
    """One worker of the pool; None means every worker of the pool."""
    hold_s: Annotated[float, Meta(ge=0.0, le=3600.0)]
    """Model seconds the override lasts from receipt; a new override replaces the old."""
    issued_by: str
    reason: str = ""
    issued_at: NonNeg = 0.0


class ClockReply(_Message, tag="gs.v1.clock_reply", frozen=True, kw_only=True):
    """The clock a worker applied (snapped to a supported step) or why it refused."""

    worker_id: Id
    applied_mhz: Mhz
    accepted: bool
    reason: str = ""


class GpuReport(_Message, tag="gs.v1.gpu_report", frozen=True, kw_only=True):
    """One instance's clock and power, as the dvfs agent sees it."""

    worker_id: Id
    clock_mhz: Mhz
    power_w: NonNeg
    energy_j: NonNeg


class DvfsReport(_Message, tag="gs.v1.dvfs_report", frozen=True, kw_only=True):
    """A dvfs agent's periodic report for its node."""

    node_id: Id
    at: NonNeg
    mode: str
    gpus: list[GpuReport]
