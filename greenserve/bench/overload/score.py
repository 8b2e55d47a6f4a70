"""Scoring one entry of ``greenserve bench overload`` from what its client saw (pure).

A request is *answered* when its client got a final answer: a completion, a 429 (HTTP)
or an ``ErrorReply`` (NATS; ``overloaded`` is the scheduler's shed). *Unanswered* ones
got nothing within the client's wait. *Admitted* ones completed; their end-to-end latency
(wall, send → answer) is judged against the request's SLO: the stack's own deadline
window ``alpha_llf · Lat`` (FREESH Eq. 6, ``ClassifiedRequest.deadline_s``), in wall
seconds at the stack's speed-up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.http_replay import HttpRecord
from loadgen.replay import ClientRecord

__all__ = ["OVERLOADED", "p99", "score_http", "score_nats"]

OVERLOADED = "overloaded"
"""The code of a request refused by a ceiling (the gateway's 429, the scheduler's shed)."""


def p99(values: Sequence[float]) -> float | None:
    """The 99th percentile, or None for no values."""
    return float(np.percentile(values, 99)) if values else None


def _answer_times(pairs: Sequence[tuple[float, float]]) -> float | None:
    return max((end - start for start, end in pairs), default=None)


def score_http(records: Sequence[HttpRecord], slo_s: float) -> dict[str, Any]:
    """What an OpenAI client saw: completions (200), 429s (with or without
    ``Retry-After``), other errors by code, and requests left without an answer."""
    completed = [r for r in records if r.status == 200]
    refused = [r for r in records if r.status == 429]
    answered = [r for r in records if r.status is not None]
    errors = Counter(r.error or f"http_{r.status}" for r in records if r.status not in (200, 429))
    latencies = [r.ended_at - r.sent_at for r in completed]
    return {
        "requests": len(records),
        "completed": len(completed),
        "shed_429": len(refused),
        "shed_429_without_retry_after": sum(1 for r in refused if not r.retry_after),
        "errors": dict(errors),
        "unanswered": len(records) - len(answered),
        "max_answer_s": _answer_times([(r.sent_at, r.ended_at) for r in answered]),
        "max_shed_answer_s": _answer_times([(r.sent_at, r.ended_at) for r in refused]),
        "p99_admitted_s": p99(latencies),
        "slo_s": slo_s,
        "p99_admitted_over_slo": _over(p99(latencies), slo_s),
        "admitted_within_slo": sum(1 for x in latencies if x <= slo_s),
    }


def score_nats(records: Sequence[ClientRecord], alpha: float, speedup: float) -> dict[str, Any]:
    """What a NATS client saw: completions, ``ErrorReply`` codes (``overloaded`` the shed),
    and requests with neither. Each completion's SLO is its own ``alpha · lat_s``."""
    completed = [r for r in records if r.completion is not None]
    failed = [r for r in records if r.completion is None and r.error is not None]
    codes = Counter(r.error.code for r in failed if r.error is not None)
    ratios = []
    latencies = []
    for r in completed:
        assert r.completion is not None
        latency = r.ended_at - r.sent_at
        latencies.append(latency)
        slo = alpha * r.completion.lat_s / speedup
        ratios.append(latency / slo if slo > 0 else float("inf"))
    ended = [(r.sent_at, r.ended_at) for r in records if r.ended]
    shed = [(r.sent_at, r.ended_at) for r in failed if r.error and r.error.code == OVERLOADED]
    return {
        "requests": len(records),
        "completed": len(completed),
        "shed_overloaded": codes.pop(OVERLOADED, 0),
        "errors": dict(codes),
        "unanswered": len(records) - len(completed) - len(failed),
        "duplicated": sum(r.duplicate_endings for r in records),
        "max_answer_s": _answer_times(ended),
        "max_shed_answer_s": _answer_times(shed),
        "p99_admitted_s": p99(latencies),
        "p99_admitted_over_slo": p99(ratios),
        "admitted_within_slo": sum(1 for x in ratios if x <= 1.0),
    }


def _over(latency: float | None, slo_s: float) -> float | None:
    return None if latency is None else latency / slo_s
