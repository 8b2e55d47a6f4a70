"""Typed settings, loaded once in each service's ``__main__`` and passed down.

Sources, highest priority first: keyword arguments, environment variables
(``GREENSERVE_<SECTION>__<FIELD>``, e.g. ``GREENSERVE_WORKER__GPU=H100-80GB``), one YAML
config file named by ``GREENSERVE_CONFIG``, then the defaults here. Every period, timeout
and limit carries its unit in its name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from proto.subjects import valid_token
from shared.zones import LiveProvider, ZoneSettings

__all__ = [
    "CONFIG_FILE_ENV",
    "ClassifierSettings",
    "ClockSettings",
    "DvfsSettings",
    "ForecasterSettings",
    "GatewaySettings",
    "NatsSettings",
    "PlannerSettings",
    "RedisSettings",
    "RouterSettings",
    "SchedulerSettings",
    "Settings",
    "TelemetrySettings",
    "WorkerSettings",
    "load_settings",
]

CONFIG_FILE_ENV = "GREENSERVE_CONFIG"


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NatsSettings(_Section):
    """Connection to NATS (JetStream enabled)."""

    url: str = "nats://127.0.0.1:4222"
    """One server's URL, or a cluster's as a comma list (``nats://a:4222,nats://b:4222``):
    the client connects to one and moves to another when it is lost."""
    replicas: int = Field(default=1, ge=1, le=5)
    """Replicas of each JetStream resource (the ingress stream, its consumer): 1 for one
    server, min(3, nodes) for a cluster. Used when a resource is created; JetStream allows
    at most 5 and needs as many nodes."""
    connect_timeout_s: float = 5.0
    reconnect_wait_s: float = 0.5
    max_reconnect_attempts: int = -1
    ping_interval_s: float = Field(default=120.0, gt=0.0)
    """Seconds between the client's pings to its server. A server that leaves more than
    ``max_outstanding_pings`` of them unanswered is dropped and the client reconnects to
    another: the only way it notices a server gone silent without closing the connection
    (a host cut off by a network partition). 120 s is nats-py's default; the multi-host
    harness sets 1 s (``docs/deploy.md``, Multi-host on one machine)."""
    max_outstanding_pings: int = Field(default=2, ge=1)
    request_timeout_s: float = 2.0
    ack_wait_s: float = 5.0
    """JetStream redelivers an ingress message not acked within this time."""
    max_deliver: int = Field(default=-1, ge=-1)
    """Deliveries of one ingress message at most; -1 (default): unlimited. A finite bound
    is honoured by the classifier, which answers the request ``unavailable`` on its last
    delivery instead of letting JetStream stop delivering it unanswered. 0 is refused."""
    user: str | None = None
    password: SecretStr | None = None
    """Masked in repr and logs; prefer ``password_file`` (never both)."""
    password_file: Path | None = None
    """File holding the password (a mounted secret); read at connect time."""
    inbox_prefix: str | None = None
    """Reply-inbox prefix; a secure stack gives each user a private ``_INBOX.<user>``."""
    tls_ca_file: Path | None = None
    """CA bundle (PEM) that signed the server's certificate; turns TLS on."""
    jetstream_check_s: float = Field(default=1.0, gt=0.0)
    """How often the owners of the ingress stream and consumer check that they exist (and
    after each reconnect), creating them again after a server lost its store."""

    @property
    def servers(self) -> list[str]:
        """The server URLs of :attr:`url`, in order."""
        return [item.strip() for item in self.url.split(",")]

    @model_validator(mode="after")
    def _max_deliver_unlimited_or_positive(self) -> NatsSettings:
        if self.max_deliver == 0:
            raise ValueError("nats.max_deliver must be -1 (unlimited) or at least 1")
        return self

    @model_validator(mode="after")
    def _urls_given(self) -> NatsSettings:
        if not all(self.servers):
            raise ValueError(f"nats.url has an empty item: {self.url!r}")
        return self


class RedisSettings(_Section):
    """Connection to Redis."""

    url: str = "redis://127.0.0.1:6379/0"
    socket_timeout_s: float = 2.0
    username: str | None = None
    """ACL user; ``None`` keeps the URL's (or the default user)."""
    password: SecretStr | None = None
    """Masked in repr and logs; prefer ``password_file`` (never both)."""
    password_file: Path | None = None
    """File holding the password (a mounted secret); read at connect time."""
    tls_ca_file: Path | None = None
    """CA bundle (PEM) for a ``rediss://`` URL whose certificate is self-signed."""
    sentinels: tuple[str, ...] = ()
    """``host:port`` of each Redis Sentinel; given, the client asks them for the primary of
    :attr:`master_name` (and asks again after a failover) and takes only the database,
    user and password from :attr:`url`."""
    master_name: str = "greenserve"
    """The name the Sentinels know the primary by."""

    @model_validator(mode="after")
    def _sentinels_are_addresses(self) -> RedisSettings:
        for item in self.sentinels:
            host, colon, port = item.rpartition(":")
            if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"redis.sentinels items are host:port, not {item!r}")
        if not self.master_name.strip():
            raise ValueError("redis.master_name must not be empty")
        if self.sentinels and self.url.startswith("rediss:"):
            raise ValueError("redis.sentinels with TLS (rediss://) is not supported")
        return self


class TelemetrySettings(_Section):
    """OpenTelemetry: off unless an OTLP endpoint is given."""

    otlp_endpoint: str | None = None
    """OTLP/HTTP traces endpoint, e.g. ``http://jaeger:4318/v1/traces``."""
    log_level: str = "INFO"
    log_json: bool = False
    metrics_port: int | None = None
    """Serve Prometheus ``/metrics`` and ``/healthz`` on this port; ``None`` turns it off."""
    metrics_host: str = "127.0.0.1"


class ClockSettings(_Section):
    """Model time: simulated workers and the load generator share a speed-up factor."""

    speedup: float = Field(default=1.0, gt=0.0)
    origin_wall_s: float | None = None
    """Wall time that maps to ``origin_model_s``; ``None`` means process start."""
    origin_model_s: float = 1_656_633_600.0
    """Model time (UTC epoch s) at the origin; default 2022-07-01, inside the carbon data."""


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


class WorkerSettings(_Section):
    """Worker shim: one engine instance."""

    worker_id: str = "worker-0"
    pool_id: str = "main"
    region: str = "PJM"
    node_id: str = "node-0"
    backend: str = "sim"
    gpu: str = "A100-80GB"
    model: str = "llama-3-8b"
    tp: int = 1
    max_num_seqs: int = 64
    stats_period_s: float = 0.5
    """Wall period of stats/heartbeat publishing."""
    heartbeat_ttl_s: float = 3.0
    ended_retention_s: float = Field(default=600.0, gt=0.0)
    """How long the worker's record of the requests it ended stays in Redis (trimmed to it;
    the key expires that long after the last write): a router that adopts placements later
    than this after the worker died runs an ended request again (services/worker/ended_log)."""
    cancel_memory_s: float = Field(default=600.0, gt=0.0)
    """How long a worker remembers the cancels it heard, so a dispatch arriving after its
    request's cancel (placed while the cancel was on its way) is ended, not run."""
    stream_flush_ms: float = 50.0
    """Tokens of one request produced within this wall window go out in one chunk."""
    vllm_url: str = "http://127.0.0.1:8000"
    vllm_read_timeout_s: float = Field(default=60.0, gt=0.0)
    """Longest silence of a ``vllm`` completion stream (before its headers, between chunks)
    before the engine is taken as stalled and the request ends with ``engine_error``; without
    it a stalled engine held the request and its slot for good. Not a limit on the request:
    the longest normal silence is queueing in the engine plus the prefill of the prompt (no
    chunk comes before the first token), so it must exceed the prefill of the largest
    prompt served, seconds to tens of seconds for a long context."""
    clock_url: str | None = None
    """Clock-control endpoint of the ``vllm`` backend (a sim-engine's ``POST /clock``);
    found automatically against a sim-engine, else clock commands are refused."""
    nvml_gpu_indices: tuple[int, ...] = ()
    """NVML indices of this instance's GPUs; non-empty reads power and energy through NVML
    (the ``vllm`` backend; read-only: clocks are set only with ``gpu_clocks``)."""
    gpu_clocks: Literal["off", "nvml"] = "off"
    """Opt-in per node: ``nvml`` sends clock commands to the node's clock agent, which locks
    the SM clock of ``nvml_gpu_indices`` through NVML (docs/gpu-clocks.md); ``off`` leaves
    clocks to the backend (the simulator's, or a sim-engine's endpoint)."""
    clock_agent_socket: str = "/run/greenserve/clockd.sock"
    """Unix socket of the node's clock agent (``python -m services.clockd --socket``)."""
    admission: bool = True
    """SLO-safe admission on dispatch (throttLL'eM Eq. 1–4, ``services/worker/admission_gate``):
    refuse with reason ``admission`` when KV would overflow or an admitted deadline break."""
    admission_hold_s: float = Field(default=0.5, ge=0.0)
    """Wall seconds a refusal keeps the gate closed unless a request ends here first."""
    lease_stale_after_s: float = Field(default=1.5, gt=0.0)
    """An event-loop gap longer than this (the process was frozen or starved) makes the
    worker check, before it sends or starts anything, whether the router reassigned its
    requests meanwhile (``docs/worker.md``, Leases). Below ``router.worker_timeout_s``:
    a gap the router may have called silence is always checked."""
    lease_settle_s: float = Field(default=0.5, ge=0.0)
    """Wall seconds the worker waits after such a gap before reading the reassignments:
    a router that called it silent just before it woke has written them by then."""


class DvfsSettings(_Section):
    """DVFS agent: one per node."""

    node_id: str = "node-0"
    mode: str = "miad"
    """``miad`` (the default, the headline's clock control: FREESH Eq. 5 against the class
    SLOs with a guard band and an SLO floor, ``services/dvfs/slo_miad.py``), ``fixed``,
    ``predictive`` or ``profile`` (``services/dvfs/service.py``)."""
    clock_mhz: float | None = None
    """Fixed clock, or MIAD's ceiling; ``None``: each GPU's maximum."""
    miad_guard: float = Field(default=0.5, gt=0.0, le=1.0)
    """MIAD counts a period congested when a class's TTFT or mean TBT passes this share of
    its SLO (the headline's ``miad_guard``, docs/simulator.md "MIAD guard band and SLO
    floor")."""
    miad_slo_floor: bool = True
    """Floor MIAD at the lowest clock at which a lone request at each bounded input
    bucket's longest prompt (and, for pools sent long prompts, the served p99) meets
    ``miad_guard`` × its TTFT SLO; off: FREESH's 300 MHz floor."""
    period_s: float = 1.0
    """Model-time control period (scaled by the speed-up in the live stack)."""
    allowed_issuers: tuple[str, ...] = ("dvfs", "planner")
    profile_min_requests: int = Field(default=64, ge=1)
    """``profile`` mode: completions of an engine seen before its profile is swept with
    their lengths (services/dvfs/profile_live.py)."""
    profile_window_s: float = Field(default=5.0, gt=0.0)
    """``profile`` mode: model seconds over which a worker's load is counted (DynamoLLM's
    instance manager: 5 s)."""
    profile_drift_window: int = Field(default=256, ge=0)
    """``profile`` mode: completions per test of the served lengths against the profile's
    (KS, services/dvfs/profile_drift.py); a drift sweeps the profile again with the latest
    window's lengths. 0: sweep once per process."""


class ForecasterSettings(_Section):
    """Forecaster: carbon intensity per region."""

    regions: tuple[str, ...] = ("CISO", "PJM", "BPAT")
    """Zones forecast, each ``eia:<BA>`` (``carbon/<BA>.csv``) or ``em:<ZONE>``
    (``carbon_em/<ZONE>_<year>.csv``); a bare code names the one source with a file for it,
    or ``source``'s (:mod:`shared.zones`)."""
    source: Literal["eia", "em"] | None = None
    """Source of bare codes in ``regions``; ``None``: the one source with a file for it."""
    zones: dict[str, ZoneSettings] = Field(default_factory=dict)
    """Per-zone settings by ``source:code`` (files, time zone, holiday calendar, live
    provider): a zone the defaults do not cover is added here, not in code."""
    mode: Literal["replay", "live"] = "replay"
    """``replay``: forecasts from the data files on the stack's model clock, every answer
    stamped with the data's time and marked ``replay``; ``live``: wall-clock time, current
    and forecast intensity from the zone's provider API (docs/forecaster.md, *Live and
    replay*)."""
    live_poll_s: dict[LiveProvider, PositiveFloat] = Field(default_factory=dict)
    """Poll period per live provider (``electricitymaps``, ``watttime``, ``eia``) in wall
    seconds; a provider not named polls at its own cadence (services/forecaster/live.py)."""
    live_urls: dict[LiveProvider, str] = Field(default_factory=dict)
    """Base URL per live provider, for a proxy or a local stand-in; default: the public API."""
    refresh_s: float = 300.0
    horizon_h: int = 24
    model_cache_dir: Path | None = None
    """Keep fitted models here (operator-owned) so a restart reuses them; ``None``: refit."""
    refit_days: float = Field(default=30.0, ge=0.0)
    """Re-estimate every region's model on all history before model time ``now`` this often
    (model days; 0: only at start-up). 30, the cadence ``greenserve bench forecaster``
    measures (docs/forecaster.md); the old models serve until the new ones are fitted."""


class PlannerSettings(_Section):
    """Planner: pool plan every epoch."""

    epoch_s: float = 1800.0
    republish_wall_s: float = 2.0
    """Re-publish the current plan this often (wall), for late joiners and a restarted Redis."""
    follower_max_epochs_ahead: int = Field(default=2, ge=0)
    """Followers believe a plan on the bus at most this many epochs past the plan in force
    and their own clock's epoch; beyond it only the stored plan vouches (shared.plan_watch)."""
    mode: str = "milp"
    """``milp`` (the default, the headline's planner: FREESH Eq. 1 every epoch over the
    workers that registered, ``services/planner/live_service.py``) or ``static`` (the
    pools of ``static_pools``, every class to every pool)."""
    static_pools: tuple[dict[str, Any], ...] = (
        {"pool_id": "main", "region": "PJM", "gpu": "A100-80GB", "tp": 1, "instances": 1},
    )
    """Pools of the static plan (fields of ``proto.messages.PoolPlan``)."""
    scheme: str = "dynamollm9"
    """Class scheme of the static plan, and of the start-up profiles in ``milp`` mode."""
    objective: str = "energy"
    """``milp`` objective: ``carbon`` (forecast intensity × power × time) or ``energy``
    (FREESH's MinEnergy; with ``primary_slack``, least carbon within that share of it)."""
    solver: str = "highs"
    """``highs`` (in process) or ``cbc``."""
    time_limit_s: float = Field(default=5.0, gt=0.0)
    """Wall limit of one epoch's solve; the core falls back to a feasible plan beyond it."""
    mip_rel_gap: float = Field(default=1e-4, ge=0.0)
    """Relative MIP gap; well below ``primary_slack``, so that near-equal plans do not decide
    the region from one solve to the next (docs/simulator.md, "Planner modes")."""
    alpha: float = Field(default=1.1, gt=0.0)
    """Safety margin on forecast peak demand (FREESH Eq. 1b)."""
    steps_per_epoch: int = Field(default=6, ge=1)
    """Planning steps per epoch (FREESH: six 5-min steps); step = epoch_s / steps."""
    demand_bin_s: float = Field(default=5.0, gt=0.0)
    """Arrivals are counted in bins this long (model s); a step's peak QPS = max bin / bin."""
    demand_history_steps: int = Field(default=12, ge=1)
    """Past steps of observed arrivals kept for the load forecast."""
    load_method: str = "recent_max"
    """Load forecaster of ``shared.domain.load_forecast``: recent_max, ewma, last."""
    recent_steps: int = Field(default=3, ge=1)
    profiles_csv: Path | None = None
    """FREESH-format profiles (+ ``clock_mhz``, as ``greenserve profile`` writes them); modes
    it lacks are measured on the engine model at start-up."""
    profile_clock_fractions: tuple[float, ...] = (1.0, 0.75, 0.5)
    """Clocks (fractions of the GPU's maximum) measured when profiling at start-up."""
    profile_window_s: float = Field(default=30.0, gt=0.0)
    """Engine seconds of Poisson arrivals per start-up measurement (short; see planner.md)."""
    time_share_slices: int = Field(default=16, ge=1)
    """Live pools serve every class: an instance is planned in 1/slices shares of its time
    (1 = FREESH's dedicated instances per class)."""
    class_groups: Literal["none", "input-split"] = "input-split"
    """``input-split``: each pool serves the long-input classes (the scheme's last input
    bucket, ≥ 1024 prompt tokens for ``dynamollm9``) or the others, never both (an exclusive
    group per pool in Eq. 1; needs at least two pools, else it is not applied; a fleet of one
    pool per region puts one group in the dirtier region, docs/planner.md "Input groups")."""
    mixed_capacity: bool = True
    """Scale each mode's rows by the capacity measured on the trace's class mix (per group
    when ``class_groups`` applies) on the engine model, at the profiles' percentile; ≈ 1 s
    per mode for Llama-3-8B on one A100, added to the start-up profiling."""
    coincident_demand: bool = True
    """Size each class for its share of the step's arrivals × the peak bin rate of all
    arrivals, not its own peak bin rate (classes sharing a pool do not peak together; the
    simulator's ``min-energy-modes`` does, docs/simulator.md "Planner modes")."""
    whole_instances: bool = True
    """Plan whole instances at their idle power (the engine model's, per mode), so a pool's
    last, partly used instance is priced in full; pools of one (region, GPU type) share its
    GPUs (a TP4 and a TP8 pool over the same GPUs: the MILP chooses the mode)."""
    primary_slack: float = Field(default=0.05, ge=0.0)
    """Share of the objective's optimum its tie-break may spend (energy objective: least
    carbon within this share of the least energy; 0.05 chosen on minutes 10-30 of conv among
    0, 0.05 and 0.3, docs/simulator.md "Planner modes")."""
    observed_profiles: bool = True
    """Re-measure the profiles on the served request sizes when they drift from the ones
    profiled (``shared/domain/observed_mix.py``): a mix the planner did not expect."""
    observed_sample: int = Field(default=2000, ge=1)
    observed_min_requests: int = Field(default=300, ge=1)
    slo_feedback: bool = True
    """Re-plan when a pool misses its SLO significantly more than the 1 % goal allows, with
    its capacity cut and its clock at the maximum (``services/planner/slo_feedback.py``)."""
    feedback_step: float | None = Field(default=0.8, gt=0.0, le=1.0)
    """The most one miss window cuts a pool's planned capacity (a factor); ``None``: down to
    the load it missed at."""
    feedback_floor: float = Field(default=0.3, ge=0.0, le=1.0)
    """The least capacity share SLO feedback leaves a pool."""
    feedback_boost: bool = True
    """A pool that missed runs at its maximum clock for one planning step."""
    feedback_replan: bool = False
    """A miss also cuts the pool's planned capacity and re-plans; ``False``: clock only.
    Off: on the code trace the re-plans' instance moves cost more SLO than they restored
    (86.7 % with the clock boost alone against 77-85 % with re-plans, docs/simulator.md
    "SLO feedback")."""
    park_workers: bool = True
    """Workers beyond their pool's planned instances park (``milp`` plans only)."""
    drain_grace_wall_s: float = Field(default=2.0, ge=0.0)
    """A pool planned to zero keeps one worker while its queue reported work this recently."""
    gate_margin: float = Field(default=1.0, ge=0.0)
    """Switch plans when saving > margin × transition cost (DynamoLLM overhead gate)."""
    start_s: float = Field(default=33.0, ge=0.0)
    """Assumed start-up time of one instance (DynamoLLM Table V, weights cached)."""
    start_power_w_per_gpu: float = Field(default=110.0, ge=0.0)


class GatewaySettings(_Section):
    """HTTP ingress (OpenAI-compatible); the models it serves are ``classifier.models``."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    """TCP port of the OpenAI-compatible API; 0 picks a free one (tests)."""
    request_timeout_s: float = Field(default=300.0, gt=0.0)
    """Longest silence (no chunk, completion or error) before the gateway answers 504."""
    publish_timeout_s: float = Field(default=5.0, gt=0.0)
    """Longest wait for JetStream to store a request before the gateway answers 503."""
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    """Larger bodies are refused with 413 before they are read (NATS max payload is 1 MiB)."""
    default_max_tokens: int = Field(default=16, ge=1)
    """Output cap when a completion request names none (OpenAI's default for completions)."""
    chat_default_max_tokens: int = Field(default=1024, ge=1)
    """Output cap when a chat request names none. OpenAI's chat API has no small default (an
    answer runs to its end), so 16 would cut nearly every answer short with ``finish_reason``
    ``length``; 1024 holds a long answer while keeping a forgotten limit from tying up a
    batch slot for a whole context. A vLLM worker stops at end-of-sequence first, so a short
    answer costs only its own tokens; a simulated worker has no end-of-sequence and generates
    exactly this many. Like ``default_max_tokens`` it is cut to what the prompt leaves of
    ``classifier.max_context_tokens`` (docs/gateway.md)."""
    max_tokens_limit: int = Field(default=1 << 20, ge=1, le=1 << 20)
    """``max_tokens`` above this is absurd and refused with 400."""
    placeholder_token: str = " tok"
    """Text sent for each generated token when the worker streams no text (simulated GPUs)."""
    chars_per_token: float = Field(default=4.0, gt=0.0)
    """Prompt-length estimate (characters per token) when no tokenizer is configured."""
    cells: tuple[str, ...] = ()
    """Namespaces of the cells this gateway spreads requests over, each request to the one
    it has the fewest requests in flight with (``services/gateway/cells.py``); empty: its
    own stack only. ``greenserve up --cells N`` gives every cell's gateway all N."""
    cell_retry_s: float = Field(default=5.0, gt=0.0)
    """How long a cell whose ingress stream did not answer is skipped."""
    # Hardening (docs/gateway.md, "Limits and keys"): the ceiling, timeouts and API keys.
    max_in_flight: int = Field(default=0, ge=0)
    """Completion requests held at once; more get 429 ``overloaded`` with ``Retry-After``.
    0: half the process's open-file limit (each held request holds a client socket; at the
    limit ``accept`` fails for everyone, health checks included)."""
    overload_retry_after_s: float = Field(default=1.0, gt=0.0)
    """``Retry-After`` of an ``overloaded`` 429 (1 s: the header's smallest whole unit)."""
    idle_timeout_s: float = Field(default=30.0, gt=0.0)
    """A connection without a complete request head this long after it opened (or after its
    last response) is closed: idle keep-alive and slow headers alike (aiohttp's keep-alive
    timer). Above the keep-alive expiry of httpx (5 s) and aiohttp's client (15 s), so the
    server never closes a connection those clients are about to reuse."""
    body_timeout_s: float = Field(default=30.0, gt=0.0)
    """Longest time to receive a request's body; a slower one gets 408 ``body_timeout``."""
    api_keys_file: Path | None = None
    """OpenAI-style API keys (one per line, or JSON/YAML with per-key limits; hashes or
    keys: ``shared/security/api_keys.py``); ``None``: no key needed (the local demo).
    ``greenserve up --secure`` generates one."""
    api_key_requests_per_min: int = Field(default=0, ge=0)
    """Per-key rate limit for keys whose entry names none; 0: none (the ceiling still holds)."""

    @model_validator(mode="after")
    def _default_within_limit(self) -> GatewaySettings:
        defaults = {
            "default_max_tokens": self.default_max_tokens,
            "chat_default_max_tokens": self.chat_default_max_tokens,
        }
        for name, value in defaults.items():
            if value > self.max_tokens_limit:
                raise ValueError(f"{name} must not exceed max_tokens_limit")
        return self

    @model_validator(mode="after")
    def _cells_are_namespaces(self) -> GatewaySettings:
        bad = [ns for ns in self.cells if not valid_token(ns)]
        if bad:
            raise ValueError(f"cells {bad} are not namespaces ([A-Za-z0-9_-]{{1,128}})")
        if len(set(self.cells)) != len(self.cells):
            raise ValueError(f"a cell is named twice in {list(self.cells)}")
        return self


class Settings(BaseSettings):
    """Every setting of a GreenServe deployment."""

    model_config = SettingsConfigDict(
        env_prefix="GREENSERVE_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    namespace: str = "gs"
    """Prefix of every subject, stream and Redis key of this stack."""
    data_dir: Path | None = None
    nats: NatsSettings = NatsSettings()
    redis: RedisSettings = RedisSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    clock: ClockSettings = ClockSettings()
    classifier: ClassifierSettings = ClassifierSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    router: RouterSettings = RouterSettings()
    worker: WorkerSettings = WorkerSettings()
    dvfs: DvfsSettings = DvfsSettings()
    forecaster: ForecasterSettings = ForecasterSettings()
    planner: PlannerSettings = PlannerSettings()
    gateway: GatewaySettings = GatewaySettings()
    shutdown_timeout_s: float = 5.0

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Add the YAML file named by ``GREENSERVE_CONFIG`` below the environment."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        sources.append(file_secret_settings)
        return tuple(sources)


def load_settings(**overrides: Any) -> Settings:
    """Load settings from the environment and config file, with explicit overrides on top."""
    settings = Settings(**overrides)
    if settings.data_dir is not None:
        # shared.paths reads the environment, so one data dir serves every module.
        os.environ.setdefault("GREENSERVE_DATA_DIR", str(settings.data_dir))
    return settings
