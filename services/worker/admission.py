"""SLO-safe admission with throttLL'eM's KV-cache and batch projection (scoreboard).

For the requests running on one engine plus a candidate, project per future iteration j
(throttLL'eM §III, no new arrivals assumed, one token per request per iteration):

    B[j]       = #{i : request i still active at j}                         (batch size)
    KV_i[j]    = ceil((prompt_i + generated_i + (j − k)) / N)  while active    (Eq. 1)
    KV[j]      = Σ_i KV_i[j]                                                  (Eq. 2)
    T̂_R[l]    = Σ_{j=k}^{l} tbt(B[j], KV[j])      (time to finish iteration l, Eq. 3)
    admit iff  max_j KV[j] ≤ capacity,  mean_j tbt ≤ TBT SLO (optional),
               T̂_R[l_i] + t_now < deadline_i for every non-lost request i   (Eq. 4)

where k is the current iteration and l_i the last iteration of request i. A running
request already projected to miss its deadline without the candidate is "lost" and does
not block admission; a candidate that would miss only its own deadline is admitted and
marked lost (throttLL'eM §3.2). The iteration-time model (``tbt(B, KV)``, seconds per
iteration, e.g. the inverse of throttLL'eM's IPS model at max clock) is passed in. The
projection itself is :func:`shared.domain.projection.project_iterations`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from shared.domain.projection import (
    FloatArray,
    IntArray,
    IterationProjection,
    project_iterations,
)

__all__ = [
    "AdmissionConfig",
    "AdmissionDecision",
    "AdmissionVerdict",
    "IterationTimeModel",
    "ScoreboardEntry",
    "batch_only",
    "check_admission",
]

IterationTimeModel = Callable[[IntArray, IntArray], FloatArray]
"""Seconds per decode iteration for arrays of (batch size, KV blocks in use)."""


def batch_only(tbt_of_batch: Callable[[IntArray], FloatArray]) -> IterationTimeModel:
    """Wrap a TBT-per-batch-size function as an iteration-time model that ignores KV."""

    def model(batch: IntArray, kv_blocks: IntArray) -> FloatArray:
        del kv_blocks
        return tbt_of_batch(batch)

    return model


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreboardEntry:
    """One request on the engine's scoreboard (or a candidate for it)."""

    request_id: str
    prompt_tokens: int
    """|q_i|: prompt length, the KV the request holds before its first output token."""
    generated_tokens: int
    """Output tokens already produced."""
    predicted_remaining_tokens: int
    """Tokens still to produce (use the error-adjusted prediction, ≥ 1 while running)."""
    deadline_s: float | None = None
    """Absolute E2E deadline; None means no deadline to protect."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionConfig:
    """Engine limits and SLOs checked on admission."""

    kv_capacity_blocks: int
    """KV blocks the engine can hold without swapping."""
    block_tokens: int = 16
    """N: tokens per KV block (vLLM default 16)."""
    mean_tbt_slo_s: float | None = None
    """throttLL'eM average-TBT SLO over the horizon (0.2 s in the paper); None skips it."""
    max_output_tokens: int = 4096
    """Projected length of a request that has outrun its prediction (throttLL'eM §1.2)."""


class AdmissionVerdict(StrEnum):
    """Why a candidate was or was not admitted."""

    ADMIT = "admit"
    ADMIT_LOST = "admit_lost"
    """Admitted although it will miss its own deadline; it breaks nobody else's."""
    KV_FULL = "kv_full"
    TBT_SLO = "tbt_slo"
    DEADLINE = "deadline"
    """Admitting it would make an admitted request miss its deadline."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionDecision:
    """Outcome of one admission check."""

    verdict: AdmissionVerdict
    peak_kv_blocks: int
    peak_batch: int
    mean_tbt_s: float
    projected_finish_s: dict[str, float]
    """Absolute projected finish time of every request, candidate included."""
    endangered: tuple[str, ...] = ()
    """Requests whose deadline the candidate would break (DEADLINE verdict)."""
    lost: tuple[str, ...] = ()
    """Requests already projected to miss their deadline (ignored by Eq. 4)."""

    @property
    def admitted(self) -> bool:
        """Whether the candidate may start now."""
        return self.verdict in (AdmissionVerdict.ADMIT, AdmissionVerdict.ADMIT_LOST)


def _finish_times(
    projection: IterationProjection, iteration_time: IterationTimeModel
) -> tuple[FloatArray, FloatArray]:
    per_iteration = np.asarray(
        iteration_time(projection.batch, projection.kv_blocks), dtype=np.float64
    )
    reach = np.cumsum(per_iteration)  # T̂_R (Eq. 3)
    return reach[projection.last_iteration], per_iteration


def check_admission(
    running: Sequence[ScoreboardEntry],
    candidate: ScoreboardEntry,
    *,
    now_s: float,
    config: AdmissionConfig,
    iteration_time: IterationTimeModel,
) -> AdmissionDecision:
    """Decide whether ``candidate`` can start now without breaking an admitted deadline.

    Args:
        running: requests on the engine now (the scoreboard).
        candidate: the request that asks to start (its ``generated_tokens`` is usually 0).
        now_s: current time on the deadlines' clock.
        config: engine KV capacity, block size and optional mean-TBT SLO.
        iteration_time: seconds per iteration for (batch, KV blocks) at the clock the
            decision assumes (throttLL'eM uses max frequency).

    Returns:
        The verdict with the projection's peaks and every request's projected finish.
    """
    everyone = [*running, candidate]
    projection = project_iterations(everyone, config.block_tokens, config.max_output_tokens)
    finish_rel, per_iteration = _finish_times(projection, iteration_time)
    finish = now_s + finish_rel
    deadlines = np.array(
        [np.inf if e.deadline_s is None else e.deadline_s for e in everyone], dtype=np.float64
    )
    lost_ids: tuple[str, ...] = ()
    if running:
        alone = project_iterations(running, config.block_tokens, config.max_output_tokens)
        alone_finish = now_s + _finish_times(alone, iteration_time)[0]
        already_lost = alone_finish >= deadlines[:-1]
        lost_ids = tuple(e.request_id for e, x in zip(running, already_lost, strict=True) if x)
    else:
        already_lost = np.zeros(0, dtype=np.bool_)
    broken = (finish[:-1] >= deadlines[:-1]) & ~already_lost
    mean_tbt = float(per_iteration.mean()) if per_iteration.size else 0.0
    peak_kv = int(projection.kv_blocks.max()) if projection.kv_blocks.size else 0
    if peak_kv > config.kv_capacity_blocks:
        verdict = AdmissionVerdict.KV_FULL
    elif config.mean_tbt_slo_s is not None and mean_tbt > config.mean_tbt_slo_s:
        verdict = AdmissionVerdict.TBT_SLO
    elif broken.any():
        verdict = AdmissionVerdict.DEADLINE
    elif finish[-1] >= deadlines[-1]:
        verdict = AdmissionVerdict.ADMIT_LOST
    else:
        verdict = AdmissionVerdict.ADMIT
    return AdmissionDecision(
        verdict=verdict,
        peak_kv_blocks=peak_kv,
        peak_batch=int(projection.batch.max()) if projection.batch.size else 0,
        mean_tbt_s=mean_tbt,
        projected_finish_s={e.request_id: float(t) for e, t in zip(everyone, finish, strict=True)},
        endangered=tuple(e.request_id for e, x in zip(running, broken, strict=True) if x),
        lost=lost_ids,
    )
