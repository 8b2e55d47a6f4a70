"""Settings of what runs on each GPU node: the worker shim and the DVFS agent."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.settings.section import _Section

__all__ = ["DvfsSettings", "WorkerSettings"]


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
    admission: bool = False
    """SLO-safe admission on dispatch (throttLL'eM Eq. 1–4, ``services/worker/admission_gate``):
    refuse with reason ``admission`` when KV would overflow or an admitted deadline break.
    Off by default: the deadlines it protects are the LLF window (α_LLF × Lat, well inside
    the 5 × Lat a request is judged by), and at fleet scale its refusals turn into queueing;
    simulated with the default planner it cut SLO attainment from 99.83 % to 94.54 % on the
    tuning window (conv minutes 0–30) and from 98.49 % to 95.08 % on code
    (docs/simulator.md, "The default and its guard rails"). It stays for a single overloaded
    worker with nowhere else to send work (tests/e2e/test_slo_protection.py)."""
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
