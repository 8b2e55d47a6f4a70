"""Loaders for the two single-instance DVFS workloads (explicit I/O, nothing else here).

- **FREESH Table 10 setting** (seed 000 §5.7): 20 min of SS requests on one GPU. The paper
  gives neither arrival rate nor lengths, only "SS requests" and, for arrivals, the Azure
  conversation trace. We take the arrival times of the trace's first ``minutes`` (about
  5 req/s) and draw each request's (prompt, output) from the trace's requests that are SS
  under FREESH partition b (prompt < 25, output < 232 tokens: 154 requests), with
  replacement and a fixed seed.
- **throttLL'eM setting** (seed 002 §5): the Azure conversation trace with its own lengths
  and its arrival times compressed so that its busiest minute runs at the engine's max load
  (Table II: Llama3-8B TP1, 13 RPS; the trace's busiest minute is 8.45 req/s), every request
  with the E2E SLO of Table II (37.7 s). Requests longer than the model's context are left
  out (counted in the returned info).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from loadgen.instance_sim import Arrival
from shared.paths import data_path

__all__ = ["freesh_ss_workload", "throttllem_workload", "with_predicted_lengths"]


def _conv_trace() -> tuple[pd.DataFrame, NDArray[np.float64]]:
    trace = pd.read_csv(data_path("traces", "AzureLLMInferenceTrace_conv.csv"))
    stamps = pd.to_datetime(trace["TIMESTAMP"])
    seconds = np.asarray((stamps - stamps.iloc[0]).dt.total_seconds(), dtype=np.float64)
    return trace, seconds


def _partition_b() -> tuple[int, int]:
    table = pd.read_csv(data_path("freesh", "partitions.csv"))
    row = table[table["partition"] == "b"]
    return (
        int(row["input_threshold_tokens"].to_numpy(np.int64)[0]),
        int(row["output_threshold_tokens"].to_numpy(np.int64)[0]),
    )


def freesh_ss_workload(
    *, minutes: float = 20.0, e2e_slo_s: float = 7.0, seed: int = 0
) -> tuple[list[Arrival], dict[str, Any]]:
    """Return the FREESH Table 10 workload and a description of how it was built.

    Args:
        minutes: length of the arrival window (FREESH: 20 min).
        e2e_slo_s: each request's deadline after arrival (FREESH Table 7, SS: 7 s), which
            predictive control uses.
        seed: seed of the length draw.
    """
    trace, seconds = _conv_trace()
    input_cut, output_cut = _partition_b()
    prompts = trace["ContextTokens"].to_numpy(np.int64)
    outputs = trace["GeneratedTokens"].to_numpy(np.int64)
    short = np.flatnonzero((prompts < input_cut) & (outputs < output_cut))
    times = seconds[seconds < minutes * 60.0]
    draw = np.random.default_rng(seed).choice(short, size=times.size, replace=True)
    arrivals = [
        Arrival(request_id=f"ss-{i}", arrival_s=float(t), prompt_tokens=int(prompts[j]),
                output_tokens=int(outputs[j]), request_type="SS", e2e_slo_s=e2e_slo_s)
        for i, (t, j) in enumerate(zip(times, draw, strict=True))
    ]  # fmt: skip
    info = {
        "requests": len(arrivals),
        "minutes": minutes,
        "mean_rate_rps": round(len(arrivals) / (minutes * 60.0), 3),
        "arrivals": "Azure conv trace timestamps, first window of the given length",
        "lengths": f"drawn with replacement from the {short.size} conv-trace requests that are "
        f"SS under FREESH partition b (prompt < {input_cut}, output < {output_cut})",
        "mean_prompt_tokens": round(float(prompts[draw].mean()), 1),
        "mean_output_tokens": round(float(outputs[draw].mean()), 1),
    }
    return arrivals, info


def throttllem_workload(
    *,
    minutes: float = 60.0,
    peak_rps: float = 13.0,
    e2e_slo_s: float = 37.7,
    max_context_tokens: int = 8192,
) -> tuple[list[Arrival], dict[str, Any]]:
    """Return the throttLL'eM-like workload and a description of it.

    Args:
        minutes: trace minutes to replay (before compression; the paper uses 60).
        peak_rps: arrival rate of the busiest minute after compression (Table II max load).
        e2e_slo_s: E2E deadline after arrival (Table II, Llama3-8B TP1: 37.7 s).
        max_context_tokens: the model's context; longer requests are left out.
    """
    trace, seconds = _conv_trace()
    keep = seconds < minutes * 60.0
    prompts = trace["ContextTokens"].to_numpy(np.int64)[keep]
    outputs = trace["GeneratedTokens"].to_numpy(np.int64)[keep]
    seconds = seconds[keep]
    busiest = float(np.bincount((seconds // 60.0).astype(np.int64)).max()) / 60.0
    scale = busiest / peak_rps
    fits = prompts + outputs <= max_context_tokens
    arrivals = [
        Arrival(request_id=f"az-{i}", arrival_s=float(t * scale), prompt_tokens=int(p),
                output_tokens=int(o), request_type="conv", e2e_slo_s=e2e_slo_s)
        for i, (t, p, o) in enumerate(zip(seconds[fits], prompts[fits], outputs[fits],
                                          strict=True))
    ]  # fmt: skip
    duration = float(seconds.max() * scale) if seconds.size else 0.0
    info = {
        "requests": len(arrivals),
        "dropped_over_context": int((~fits).sum()),
        "trace_minutes": minutes,
        "replayed_minutes": round(duration / 60.0, 2),
        "time_compression": round(1.0 / scale, 4),
        "peak_minute_rps": peak_rps,
        "mean_rate_rps": round(len(arrivals) / max(duration, 1e-9), 3),
        "mean_prompt_tokens": round(float(prompts[fits].mean()), 1),
        "mean_output_tokens": round(float(outputs[fits].mean()), 1),
    }
    return arrivals, info


def with_predicted_lengths(arrivals: list[Arrival], error_p95: float, seed: int) -> list[Arrival]:
    """Return ``arrivals`` with noisy predicted output lengths (throttLL'eM §1.5).

    Relative Gaussian noise with σ = e_p95 / 1.96, so 95 % of predictions are within
    ``error_p95`` of the true length; 0 keeps the oracle.
    """
    if error_p95 <= 0.0:
        return arrivals
    noise = np.random.default_rng(seed).normal(0.0, error_p95 / 1.96, size=len(arrivals))
    return [
        replace(a, predicted_output_tokens=max(1, round(a.output_tokens * (1.0 + e))))
        for a, e in zip(arrivals, noise, strict=True)
    ]
