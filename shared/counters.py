"""Prometheus metrics every service shares, exported on ``/metrics`` (telemetry.metrics_port)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "CANCELLED",
    "COMPLETIONS",
    "DECISIONS",
    "ERRORS",
    "GC_PAUSE_S",
    "MESSAGES",
    "MISSED_ENDINGS",
    "PLANNER_ADDED_INSTANCES",
    "PLANNER_SOLVE_S",
    "PROFILE_SWEEPS",
    "QUEUE_DEPTH",
    "REQUESTS",
    "REQUEST_LATENCY_S",
]

ERRORS: Final = Counter(
    "greenserve_errors_total",
    "Messages rejected or failed, by service and reason",
    ["service", "code"],
)
"""Every error reply or dropped message increments this, labelled by its reason code."""

MESSAGES: Final = Counter(
    "greenserve_messages_total", "Messages handled, by service and kind", ["service", "kind"]
)

REQUESTS: Final = Counter(
    "greenserve_requests_total", "Requests classified, by class and pool", ["request_class", "pool"]
)

COMPLETIONS: Final = Counter(
    "greenserve_worker_completions_total",
    "Requests a worker completed, by worker and the model it serves",
    ["worker", "model"],
)
"""In a stack of several models each model's completions show on its own workers only."""

QUEUE_DEPTH: Final = Gauge("greenserve_queue_depth", "Requests queued per pool", ["pool"])

DECISIONS: Final = Counter(
    "greenserve_placements_total", "Placement decisions, by placer and pool", ["placer", "pool"]
)

REQUEST_LATENCY_S: Final = Histogram(
    "greenserve_request_latency_seconds",
    "Wall-clock latency seen by the worker, by phase (ttft, e2e) and class",
    ["phase", "request_class"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)

MISSED_ENDINGS: Final = Counter(
    "greenserve_missed_endings_total",
    "Requests a service still held as placed although their worker had ended them (its "
    "request.done never arrived), found in the workers' ended records",
    ["service"],
)

CANCELLED: Final = Counter(
    "greenserve_cancelled_total",
    "Requests ended because their client cancelled them, by the service that ended them and "
    "where the request was: submit (before it was queued), queued, requeue, dispatch (on "
    "arrival at a worker), running (aborted in the engine)",
    ["service", "stage"],
)

PROFILE_SWEEPS: Final = Counter(
    "greenserve_dvfs_profile_sweeps_total",
    "Profiles the dvfs agent swept in profile mode: first (enough lengths seen) or drift "
    "(the served mix moved)",
    ["reason"],
)

PLANNER_ADDED_INSTANCES: Final = Counter(
    "greenserve_planner_added_instances_total",
    "Instances SLO feedback added to a pool that still missed at its maximum clock",
    ["pool"],
)

PLANNER_SOLVE_S: Final = Histogram(
    "greenserve_planner_solve_seconds",
    "Wall time of one epoch's plan solve (MILP and any fallback), by outcome",
    ["status"],
    buckets=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0),
)

GC_PAUSE_S: Final = Histogram(
    "greenserve_gc_pause_seconds",
    "Wall time of each cyclic garbage collection, during which the service's event loop "
    "runs nothing, by service and generation (shared/gc_pauses.py)",
    ["service", "generation"],
    buckets=(0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3),
)
