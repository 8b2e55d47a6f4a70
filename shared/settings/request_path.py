"""Settings of the request path: classifier, scheduler and router."""

from __future__ import annotations

from pydantic import Field, model_validator

from shared.settings.section import _Section

__all__ = ["ClassifierSettings", "RouterSettings", "SchedulerSettings"]


class ClassifierSettings(_Section):
    """Classifier: sizes, class, SLO and pool of each request."""

    scheme: str = "dynamollm9"
    predictor: str = "quantile"
    """Output-length predictor: quantile (online, learns from completions; default), oracle,
    oracle-noisy or class-accuracy (trace replay only: they read the true length), proxy."""
    tokenizer_path: str | None = None
    models: tuple[str, ...] = (
        "llama-3-8b",
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3-70b",
    )
    """Models this deployment serves; others are rejected with ``unknown_model``."""
    max_context_tokens: int = 8192
    """Prompt + output beyond this is rejected with ``too_long``."""
    max_clock_skew_s: float = 5.0
    """A ``sent_at`` further ahead of our clock than this is replaced by the receipt time."""
    alpha_llf: float = 1.4
    """Client window W = α_LLF · Lat (FREESH Eq. 6)."""
    default_ttft_ms: float = 250.0
    default_tbt_ms: float = 50.0
    fetch_batch: int = Field(default=64, ge=1)
    """Most pushed ingress messages classified and handed off as one batch."""
    plan_wait_s: float = Field(default=10.0, ge=0.0)
    """At start-up, leave the ingress stream untouched until a plan arrives, at most this
    long: requests published meanwhile wait in the stream instead of getting ``no_plan``."""
    handoff_retry_first_s: float = Field(default=0.5, gt=0.0)
    """After a failed hand-off to the scheduler (Redis or the scheduler away), the ingress
    message comes back after this; each further failure doubles the wait."""
    handoff_retry_max_s: float = Field(default=5.0, gt=0.0)
    """Ceiling of that wait: an outage of any length is retried at least this often."""
    max_ingress_wait_s: float = Field(default=60.0, gt=0.0)
    """A request first delivered to the classifier this long (wall) after the ingress
    stream stored it is answered ``overloaded`` instead of classified: the stream backs up
    only when the control plane is offered more than it handles, and its client has waited
    too long already. Redeliveries (a failed hand-off) are exempt: they wait by design.
    Above ``plan_wait_s`` and a restart of the request path, which leave requests in the
    stream for seconds."""
    handoff_give_up_s: float = Field(default=3000.0, gt=0.0)
    """An ingress message this old whose hand-off fails again ends with ``unavailable`` to
    its client. Below the ingress stream's ``max_age`` (3,600 s), so a request is answered
    before the stream would drop it unanswered."""

    @model_validator(mode="after")
    def _retry_ceiling_above_first(self) -> ClassifierSettings:
        if self.handoff_retry_max_s < self.handoff_retry_first_s:
            raise ValueError("classifier.handoff_retry_max_s must be >= handoff_retry_first_s")
        return self


class SchedulerSettings(_Section):
    """Scheduler: per-pool queues."""

    discipline: str = "llf"
    """Queue discipline: llf (FREESH Eq. 6, default), fcfs, edf, srtf or ssjf."""
    ready_period_ms: float = 50.0
    """While a pool has queued work, remind routers this often (covers lost events)."""
    unplaced_timeout_s: float = 3.0
    """A request a router pulled but never placed (the router died) is re-queued after this."""
    ended_audit_period_s: float = Field(default=5.0, gt=0.0)
    """Placement records older than this are looked up in the workers' ended records this
    often, and those of ended requests deleted (``shared/ended_lookup.py``)."""
    cancel_ttl_s: float = Field(default=3600.0, gt=0.0)
    """How long a cancel is remembered (Redis ``cancelled`` mark and memory) for a request
    that reaches the scheduler after it: the ingress stream's ``max_age``, so a request
    still in its backlog is ended when it arrives."""
    store_check_period_s: float = Field(default=0.5, gt=0.0)
    """Wall period of the check for a Redis that lost its data (restarted empty): its
    marker key gone, the scheduler writes the queues it holds back (``docs/scheduling.md``)."""
    max_queued_per_pool: int = Field(default=4096, ge=1)
    """A pool's queue holds at most this many requests; the next is ended at its hand-off
    with ``overloaded`` (``services/scheduler/ceiling.py``). 4,096 is two seconds of the
    control plane's sustained 2,000 req/s: room for any burst the workers absorb, and a
    bound on the queue's memory and Redis records when they do not."""
    max_queue_wait_s: float = Field(default=30.0, gt=0.0)
    """A request queued longer than this (wall, from its first entry into the queue) is
    taken out and ended with ``overloaded``: under overload a client hears within this
    bound instead of waiting minutes. Above the longest wait the fault scenarios cause (a
    frozen worker's requests come back after ``router.worker_timeout_s``)."""
    ladder: bool = True
    """Run DynamoLLM's emergency ladder over each pool's queue every ready period
    (reorder → max clock → re-steer → shed; ``docs/scheduling.md``)."""
    ladder_shed: bool = False
    """Let the ladder's last rung end hopeless requests with error ``shed`` (opt-in: it
    changes what clients see, and a stack recovering from a fault would shed its backlog)."""
    ladder_imminent_laxity_s: float = Field(default=0.5, ge=0.0)
    """A queued request is at risk when deadline − now − Lat falls below this (model s)."""
    ladder_escalate_after_s: float = Field(default=2.0, ge=0.0)
    """Model seconds a rung gets before the next one."""
    ladder_recover_after_s: float = Field(default=10.0, ge=0.0)
    """Risk-free model seconds before the ladder releases its overrides."""
    ladder_shed_wait_s: float = Field(default=30.0, ge=0.0)
    """Only requests queued at least this long (model s) are shed."""
    ladder_clock_hold_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    """Model seconds one max-clock override lasts; refreshed while the emergency lasts."""


class RouterSettings(_Section):
    """Router: places admitted requests on workers."""

    placer: str = "least-loaded"
    """Placement policy: least-loaded (default), bfio (seed 003), jsq, rr, p2c or fcfs-fill.
    Chosen on minutes 0-30 of ``conv`` (the tuning window) with the rest of the default:
    least-loaded 99.66 % SLO, 3,527 Wh; BF-IO 88.49 %, 3,604 Wh (``python
    tools/sim_variant.py --trace conv --window 0:1800 --set 'placer="bfio"'``)."""
    router_id: str = "router-0"
    tick_ms: float = 20.0
    """Wall period of the placement loop when woken by no event."""
    worker_timeout_s: float = 3.0
    """A worker silent this long is considered gone; its requests are re-queued."""
    lease_s: float = Field(default=10.0, gt=0.0)
    """Wall seconds a dispatch's lease runs from its sending: a worker that reads the
    dispatch later (it was frozen) does not run it. Longer than ``worker_timeout_s``, so a
    worker the router still counts alive never drops a dispatch (``docs/routing.md``)."""
    store_check_period_s: float = Field(default=0.5, gt=0.0)
    """Wall period of the check for a Redis that lost its data (restarted empty): its
    marker key gone, the router writes the placements it holds back."""
    ended_audit_period_s: float = Field(default=5.0, gt=0.0)
    """Accepted placements older than this are looked up in the workers' ended records this
    often: an ending whose ``request.done`` this router missed frees its slot within two
    periods (``shared/ended_lookup.py``)."""
    batches_in_flight: int = Field(default=4, ge=1, le=64)
    """Dispatch batches one worker may have unanswered at once. With 1, a request placed
    while its worker's batch awaits the reply waits a round trip (docs/performance.md,
    "Batches in flight"); more batches in flight mean smaller batches, so more messages
    under load."""

    @model_validator(mode="after")
    def _lease_outlasts_the_timeout(self) -> RouterSettings:
        if self.lease_s <= self.worker_timeout_s:
            raise ValueError("router.lease_s must be > router.worker_timeout_s")
        return self
