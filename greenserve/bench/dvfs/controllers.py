"""The clock controllers ``greenserve bench dvfs`` compares, and the models they run on.

Each maker builds a fresh controller for one simulated run; the IPS and prefill models of
predictive control are fitted on the engine's own profiler data once per process.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from greenserve.bench.dvfs.paper import PAPER_THROTTLLEM
from loadgen.instance_sim import Arrival
from services.dvfs.controller import ClockController
from services.dvfs.perf_model import (
    IpsModel,
    PrefillModel,
    evaluate_ips_model,
    fit_ips_model,
    profile_engine,
    profile_prefill,
)
from services.dvfs.predictive import (
    DEFAULT_ARRIVAL_WINDOW_S,
    PredictiveConfig,
    PredictiveController,
)
from services.dvfs.profile_build import profile_of_lengths
from services.dvfs.profile_policy import (
    DEFAULT_EMERGENCY_SHARE,
    ProfilePolicy,
    ProfilePolicyConfig,
)
from shared.engine import EngineConfig, create_engine

__all__ = ["predictive_makers", "profile_makers", "trained_ips_model"]


@functools.cache
def trained_ips_model(
    gpu: str, model: str, tp: int = 1
) -> tuple[IpsModel, PrefillModel, dict[str, Any]]:
    """Profile the engine and fit the IPS and prefill models (once per process).

    Returns:
        The IPS model fitted on all profiler rows, the prefill model, and a report with
        Table III-style accuracy at 90/10 and 10/90 train/test splits.
    """
    config = EngineConfig(gpu=gpu, model=model, tp=tp)
    began = time.perf_counter()
    data = profile_engine(lambda: create_engine(config))
    full = fit_ips_model(data)
    seconds = time.perf_counter() - began
    prefill = profile_prefill(lambda: create_engine(config))
    report: dict[str, Any] = {"profile_and_fit_s": round(seconds, 2), "rows": len(data)}
    for label, share in (("90_10", 0.9), ("10_90", 0.1)):
        train, test = data.split(share, seed=0)
        accuracy = evaluate_ips_model(fit_ips_model(train), test)
        report[label] = {
            "r2": round(accuracy.r2, 4),
            "mape_pct": round(accuracy.mape_pct, 2),
            "mae_ips": round(accuracy.mae_ips, 3),
            "time_error_p95": round(accuracy.time_error_p95, 4),
        }
    report["paper"] = PAPER_THROTTLLEM["ips_model_llama3_8b_tp1"]
    return full, prefill, report


def predictive_makers(
    model: IpsModel,
    prefill: PrefillModel,
    base: PredictiveConfig,
    margin: float,
) -> dict[str, Callable[[], ClockController]]:
    """The predictive variants, from throttLL'eM as published to GreenServe's default.

    ``predictive-paper``: Eq. 1 projection (no arrivals), decode-only model;
    ``predictive-prefill``: + the prefill budget at the last period's prompt rate;
    ``predictive-arrivals``: + the arrival stream of the last ``DEFAULT_ARRIVAL_WINDOW_S``;
    ``predictive``: + the model margin (90/10 held-out p95 of the time error).
    """
    arrivals = replace(base, arrival_window_s=DEFAULT_ARRIVAL_WINDOW_S)
    full = replace(arrivals, time_margin=margin)
    return {
        "predictive-paper": functools.partial(PredictiveController, model, base),
        "predictive-prefill": functools.partial(PredictiveController, model, base, prefill=prefill),
        "predictive-arrivals": functools.partial(
            PredictiveController, model, arrivals, prefill=prefill
        ),
        "predictive": functools.partial(PredictiveController, model, full, prefill=prefill),
    }


def profile_makers(
    config: EngineConfig,
    arrivals: Sequence[Arrival],
    *,
    ttft_slo_s: float,
    tbt_slo_s: float,
    e2e_slo_s: float,
) -> dict[str, Callable[[], ClockController]]:
    """DynamoLLM's instance manager on a profile of this workload's lengths: its filter
    alone (``profile-filter``: TTFT and TBT, least power), with step 2 of its emergency
    ladder (``profile-dynamollm``: maximum clock for a period after a request came within
    ``DEFAULT_EMERGENCY_SHARE`` of a bound) and with GreenServe's E2E bound on top (``profile``).

    The profile (P99 TTFT, TBT and E2E, power, at six loads × the 200-MHz clock levels) is
    swept on the engine simulator with the workload's own prompt and output lengths, as
    DynamoLLM profiles each request class before deployment.
    """
    prompts = [a.prompt_tokens for a in arrivals]
    outputs = [a.output_tokens for a in arrivals]
    began = time.perf_counter()
    table = profile_of_lengths(config, prompts, outputs, partition="bench", name="workload")
    print(f"  profile table: {time.perf_counter() - began:.1f} s", file=sys.stderr)
    filter_only = ProfilePolicyConfig(ttft_slo_s=ttft_slo_s, tbt_slo_s=tbt_slo_s)
    published = replace(filter_only, emergency_share=DEFAULT_EMERGENCY_SHARE)
    bounded = replace(published, e2e_slo_s=e2e_slo_s)
    return {
        "profile-filter": functools.partial(ProfilePolicy, table, filter_only),
        "profile-dynamollm": functools.partial(ProfilePolicy, table, published),
        "profile": functools.partial(ProfilePolicy, table, bounded),
    }
