"""Latency budgets and laxity of one request (FREESH Eq. 6).

FREESH §3.3 defines, for request i on the GPU configuration that serves it::

    Lat_i   = N̂_i · T_TBT + T_TTFT          (no-queueing execution time)
    W_i     = α_LLF · Lat_i,  α_LLF = 1.4   (client-side window)
    ℓ_i(t)  = (t_arr,i + W_i) − t − T_remain,i

The server-side SLO window is β_LLF · Lat_i with β_LLF = 5 (FREESH Eq. 10, following
DynamoLLM). These helpers build Lat_i, W_i and T_remain from a configuration's profiled
TTFT and TBT for every queue discipline, the LLF simulator and the metrics; ℓ_i itself is
:func:`shared.domain.laxity.laxity_s`, the one formula the router and the emergency ladder
apply as well, so a deadline means the same thing everywhere.
"""

from __future__ import annotations

from typing import Final

from shared.domain import laxity

__all__ = [
    "ALPHA_LLF",
    "BETA_SLO",
    "deadline_s",
    "laxity_s",
    "no_queue_latency_s",
    "remaining_time_s",
]

ALPHA_LLF: Final = 1.4
"""FREESH α_LLF: client window W_i = α_LLF · Lat_i (swept over [1.4, 1.6], Fig. 18)."""

BETA_SLO: Final = 5.0
"""FREESH β_LLF: server-side SLO window β · Lat_i used by the violation rate (Eq. 10)."""


def no_queue_latency_s(predicted_output_tokens: int, ttft_s: float, tbt_s: float) -> float:
    """Return Lat_i = N̂·TBT + TTFT, the no-queueing execution time (FREESH Eq. 6).

    Args:
        predicted_output_tokens: N̂_i, the classifier's predicted output length.
        ttft_s: profiled time to first token of the serving configuration.
        tbt_s: profiled time between tokens of the serving configuration.
    """
    return predicted_output_tokens * tbt_s + ttft_s


def deadline_s(
    arrival_s: float,
    predicted_output_tokens: int,
    ttft_s: float,
    tbt_s: float,
    alpha: float = ALPHA_LLF,
) -> float:
    """Return the absolute deadline t_arr + α·Lat_i (EDF key; FREESH §2.4 baseline)."""
    return arrival_s + alpha * no_queue_latency_s(predicted_output_tokens, ttft_s, tbt_s)


def remaining_time_s(
    predicted_output_tokens: int, generated_tokens: int, ttft_s: float, tbt_s: float
) -> float:
    """Return T_remain,i, the predicted processing time still needed.

    Remaining tokens times TBT (FREESH repo: remaining_tokens / tokens_per_sec); a request
    that has not produced its first token still owes its prefill, so TTFT is added until then.
    Past its predicted length a request owes nothing more as far as the scheduler knows.
    """
    remaining_tokens = max(predicted_output_tokens - generated_tokens, 0)
    prefill = ttft_s if generated_tokens == 0 else 0.0
    return remaining_tokens * tbt_s + prefill


def laxity_s(
    arrival_s: float,
    window_s: float,
    remaining_s: float,
    now_s: float,
) -> float:
    """Return ℓ_i(t) = t_arr + W_i − t − T_remain (FREESH Eq. 6); negative means late."""
    return laxity.laxity_s(arrival_s + window_s, remaining_s, now_s)
