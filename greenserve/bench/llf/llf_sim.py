"""Tick-based preemptive queue simulator: FREESH Algorithm 1 and its baselines.

Every tick Δt the simulator takes the arrived, unfinished requests (running and waiting
alike), ranks them by the policy, gives the ``slots`` workers to the best ones and serves
each for Δt. A request that loses its slot to a better-ranked one is preempted (FREESH
§2.4: "a running request with larger ℓ loses its slot to one with strictly smaller ℓ").

Ranking keys are those of :mod:`services.scheduler.queueing` re-evaluated every tick from
the current progress, so LLF here *is* FREESH Eq. 6 with T_remain shrinking as tokens are
produced. Schedulers see only predicted lengths; the true length decides when a request
finishes.

Service model (as the public FREESH simulator): a served request accumulates service time;
its k-th token completes once the service reaches prefill + k·TBT, where prefill is TTFT
when ``model_prefill`` is set and 0 otherwise (the FREESH simulator produces tokens at
1/TBT from the first tick and uses TTFT only inside Lat). Tokens are stamped at the *end*
of the tick that completes them (FREESH Fig. 4 counts TTFT at the end of the first slot;
the public simulator stamps at the start, 0.1 s earlier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from services.scheduler.laxity import ALPHA_LLF
from services.scheduler.queueing import DEFAULT_AGING_TOKENS_PER_S
from shared.metrics.records import RecordColumns

__all__ = ["POLICIES", "TickSimConfig", "TickSimResult", "simulate_ticks"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

POLICIES: Final = ("fcfs", "edf", "srtf", "ssjf", "llf")
"""Policies the simulator ranks by (same names as :func:`make_discipline`)."""

_EPS: Final = 1e-9  # absorbs float drift when service reaches a token boundary exactly


@dataclass(frozen=True, slots=True, kw_only=True)
class TickSimConfig:
    """Settings of one simulation (FREESH App. C.4 defaults)."""

    slots: int = 20
    """Worker slots served in parallel (public simulator: 20)."""
    tick_s: float = 0.1
    """Re-planning period Δt."""
    alpha: float = ALPHA_LLF
    """Client window factor of EDF deadlines and LLF laxity."""
    aging_tokens_per_s: float = DEFAULT_AGING_TOKENS_PER_S
    """SSJF aging rate."""
    model_prefill: bool = False
    """Charge TTFT of service before the first token (off in the FREESH simulator)."""
    gap_clients: int = 4
    """Round-robin clients of the repo's gap fairness."""
    max_ticks: int = 10_000_000
    """Safety stop."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TickSimResult:
    """Outcome of one simulation."""

    columns: RecordColumns
    """Per-request outcome with per-token times, ready for :func:`shared.metrics.summarize`."""
    gap_fairness_produced: FloatArray
    """Tokens produced per tick and round-robin client (for the repo's gap fairness)."""
    gap_fairness_backlogged: NDArray[np.bool_]
    """Whether each client had an arrived, unfinished request in each tick."""
    ticks: int
    """Ticks simulated."""


def _rank_keys(
    policy: str,
    now_s: float,
    arrival: FloatArray,
    predicted: IntArray,
    produced: IntArray,
    lat: FloatArray,
    ttft: FloatArray,
    tbt: FloatArray,
    config: TickSimConfig,
) -> FloatArray:
    if policy == "fcfs":
        return arrival
    if policy == "edf":
        return arrival + config.alpha * lat
    if policy == "srtf":
        remaining: FloatArray = np.maximum(predicted - produced, 0).astype(np.float64)
        return remaining
    if policy == "ssjf":
        aged: FloatArray = predicted + config.aging_tokens_per_s * arrival
        return aged
    if policy == "llf":
        remain = np.maximum(predicted - produced, 0) * tbt
        if config.model_prefill:
            remain = remain + np.where(produced == 0, ttft, 0.0)
        laxity: FloatArray = arrival + config.alpha * lat - now_s - remain  # FREESH Eq. 6
        return laxity
    raise ValueError(f"unknown policy {policy!r}; choose one of {POLICIES}")


def simulate_ticks(
    policy: str,
    *,
    arrival_s: FloatArray,
    true_output_tokens: IntArray,
    predicted_output_tokens: IntArray,
    ttft_s: FloatArray,
    tbt_s: FloatArray,
    request_class: str = "",
    config: TickSimConfig | None = None,
) -> TickSimResult:
    """Simulate a preemptive queue under ``policy`` until every request finishes.

    Args:
        policy: one of :data:`POLICIES`.
        arrival_s: arrival times (any order).
        true_output_tokens: real output lengths (≥ 1).
        predicted_output_tokens: lengths the scheduler believes (N̂ of FREESH Eq. 6).
        ttft_s: profiled TTFT per request; enters Lat_i and, optionally, service.
        tbt_s: profiled TBT per request; a served request makes 1/TBT tokens per second.
        request_class: class label written into the result columns.
        config: simulation settings.

    Returns:
        Per-request outcome (token times included) and the per-tick service by client.
    """
    cfg = config or TickSimConfig()
    n = arrival_s.shape[0]
    if n and int(true_output_tokens.min()) < 1:
        raise ValueError("every request must produce at least one token")
    true_tokens = true_output_tokens.astype(np.int64)
    predicted = predicted_output_tokens.astype(np.int64)
    lat = predicted * tbt_s + ttft_s  # Lat_i (FREESH Eq. 6)
    prefill = ttft_s if cfg.model_prefill else np.zeros(n)
    index = np.arange(n)
    served_s = np.zeros(n)
    produced = np.zeros(n, dtype=np.int64)
    token_owner: list[IntArray] = []
    token_count: list[IntArray] = []
    token_time: list[float] = []
    per_client: list[FloatArray] = []
    backlog: list[NDArray[np.bool_]] = []
    client = index % cfg.gap_clients
    tick = 0
    while (produced < true_tokens).any():
        if tick >= cfg.max_ticks:
            raise RuntimeError(f"simulation did not finish within {cfg.max_ticks} ticks")
        now = tick * cfg.tick_s
        alive = np.flatnonzero((arrival_s <= now + _EPS) & (produced < true_tokens))
        made: FloatArray = np.zeros(cfg.gap_clients)
        if alive.size:
            keys = _rank_keys(
                policy,
                now,
                arrival_s[alive],
                predicted[alive],
                produced[alive],
                lat[alive],
                ttft_s[alive],
                tbt_s[alive],
                cfg,
            )
            order = np.lexsort((index[alive], arrival_s[alive], keys))
            chosen = alive[order[: cfg.slots]]
            served_s[chosen] += cfg.tick_s
            done = np.floor((served_s[chosen] - prefill[chosen]) / tbt_s[chosen] + _EPS)
            now_done = np.minimum(np.maximum(done, 0).astype(np.int64), true_tokens[chosen])
            new = now_done - produced[chosen]
            produced[chosen] = now_done
            emitted = new > 0
            if emitted.any():
                token_owner.append(chosen[emitted])
                token_count.append(new[emitted])
                token_time.append(now + cfg.tick_s)
                made = np.bincount(
                    client[chosen], weights=new.astype(np.float64), minlength=cfg.gap_clients
                ).astype(np.float64)
        per_client.append(made)
        backlog.append(np.bincount(client[alive], minlength=cfg.gap_clients) > 0)
        tick += 1
    columns = _columns(arrival_s, true_tokens, predicted, lat, token_owner, token_count, token_time)
    columns.request_class = np.full(n, request_class)
    return TickSimResult(
        columns=columns,
        gap_fairness_produced=np.array(per_client).reshape(-1, cfg.gap_clients),
        gap_fairness_backlogged=np.array(backlog, dtype=np.bool_).reshape(-1, cfg.gap_clients),
        ticks=tick,
    )


def _columns(
    arrival_s: FloatArray,
    true_tokens: IntArray,
    predicted: IntArray,
    lat: FloatArray,
    owners: list[IntArray],
    counts: list[IntArray],
    times: list[float],
) -> RecordColumns:
    if owners:
        owner = np.concatenate(owners)
        count = np.concatenate(counts)
        when = np.repeat(np.array(times), [len(o) for o in owners])
        # Group token batches by request, in time order (stable sort keeps tick order).
        by_request = np.argsort(owner, kind="stable")
        flat = np.repeat(when[by_request], count[by_request])
    else:
        flat = np.zeros(0)
    n = arrival_s.shape[0]
    offsets = np.concatenate(([0], np.cumsum(true_tokens))).astype(np.int64)
    first = flat[offsets[:-1]] if flat.size else np.full(n, np.nan)
    finish = flat[offsets[1:] - 1] if flat.size else np.full(n, np.nan)
    return RecordColumns(
        request_class=np.full(n, "", dtype=np.str_),
        arrival_s=arrival_s.astype(np.float64),
        first_token_s=first,
        finish_s=finish,
        output_tokens=true_tokens,
        predicted_output_tokens=predicted,
        latency_budget_s=lat,
        completed=np.ones(n, dtype=np.bool_),
        token_times_flat=flat,
        token_offsets=offsets,
    )
