"""``greenserve bench llf``: queueing policies in the FREESH Table 5 setting.

Runs EDF, SRTF, FCFS and LLF through the tick simulator (:mod:`greenserve.bench.llf.llf_sim`)
per request type (SS/SL/LS/LL) and QPS, as FREESH App. C.4 does: 100 Poisson requests,
20 worker slots, 0.1 s ticks, seed 42, partition-b TP8-A100 profiles (TTFT, TBT). It reports
violation % (Eq. 10), mean TTFT, Jain fairness by FREESH Eq. 9 and by the public
simulator's gap metric, and Avg MaxWaitingTime, with Table 5 beside each number.

Output lengths: the paper draws them from LMSYS-Chat-1M prompts answered by Llama3-70B,
which are not available here. We draw them from the Azure conversation trace, split by the
partition-b thresholds (input < 25 tokens is short, output < 232 tokens is short). The trace
has no short-input long-output request, so SL falls back to all long-output requests (input
length does not enter this simulation); the result says so.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from greenserve.bench.llf.llf_sim import TickSimConfig, simulate_ticks
from greenserve.bench.llf.options import HELP, NAME, add_arguments
from shared.metrics import gap_fairness, summarize
from shared.paths import data_path

__all__ = ["HELP", "NAME", "add_arguments", "load_length_pools", "load_profiles", "run"]

TYPES: Final = ("SS", "SL", "LS", "LL")
POLICIES: Final = ("EDF", "SRTF", "FCFS", "LLF")

REPO_SIM_PROFILES: Final = {
    "SS": (144.49, 27.34),
    "SL": (125.9, 27.61),
    "LS": (140.69, 37.87),
    "LL": (77.99, 26.27),
}
"""(TTFT ms, TBT ms) hard-coded in the public FREESH ``LLF-simulation.py`` (seed 000 §3)."""

# FREESH Table 5 (seed 000 §5.6): per QPS, metric, type → EDF/SRTF/FCFS/LLF.
PAPER_TABLE5: Final[dict[int, dict[str, dict[str, tuple[float, float, float, float]]]]] = {
    15: {
        "violation_pct": {
            "SS": (0, 0, 11, 1),
            "SL": (0, 0, 18, 0),
            "LS": (0, 0, 29, 3),
            "LL": (0, 0, 22, 0),
        },
        "ttft_s": {
            "SS": (0.7, 0.7, 1.7, 0.7),
            "SL": (19.6, 19.4, 28.1, 4.8),
            "LS": (1.5, 1.4, 3.9, 1.3),
            "LL": (14.9, 14.9, 27.9, 7.5),
        },
        "jain": {
            "SS": (0.7, 0.7, 0.4, 0.6),
            "SL": (0.5, 0.5, 0.8, 1.0),
            "LS": (0.7, 0.7, 0.4, 0.6),
            "LL": (0.6, 0.6, 0.6, 1.0),
        },
        "max_waiting_s": {
            "SS": (0.9, 0.9, 1.7, 0.9),
            "SL": (22.6, 22.5, 28.1, 6.6),
            "LS": (1.7, 1.7, 3.9, 1.6),
            "LL": (19.1, 19.1, 27.9, 9.8),
        },
    },
    25: {
        "violation_pct": {
            "SS": (0, 0, 16, 0),
            "SL": (0, 0, 15, 0),
            "LS": (0, 0, 28, 1),
            "LL": (0, 0, 20, 0),
        },
        "ttft_s": {
            "SS": (1.4, 1.4, 2.5, 1.3),
            "SL": (21.6, 21.5, 29.5, 6.9),
            "LS": (2.1, 2.1, 3.7, 1.7),
            "LL": (17.7, 17.8, 29.1, 7.8),
        },
        "jain": {
            "SS": (0.8, 0.8, 0.4, 0.6),
            "SL": (0.8, 0.8, 0.6, 1.0),
            "LS": (0.8, 0.8, 0.5, 0.7),
            "LL": (0.6, 0.6, 0.6, 1.0),
        },
        "max_waiting_s": {
            "SS": (1.5, 1.5, 2.5, 1.5),
            "SL": (23.0, 23.0, 29.5, 8.5),
            "LS": (2.2, 2.2, 3.7, 1.8),
            "LL": (20.4, 20.4, 29.1, 9.7),
        },
    },
}


def load_profiles(source: str = "csv") -> dict[str, tuple[float, float]]:
    """Return (TTFT s, TBT s) per type for partition b on TP8-A100 (mode m3)."""
    if source == "repo-sim":
        return {t: (ttft / 1000, tbt / 1000) for t, (ttft, tbt) in REPO_SIM_PROFILES.items()}
    frame = pd.read_csv(data_path("freesh", "profiles.csv"))
    rows = frame[(frame["partition"] == "b") & (frame["mode"] == "m3")]
    names = rows["request_type"].astype(str).tolist()
    ttft_ms = rows["ttft_ms"].to_numpy(np.float64)
    tbt_ms = rows["tbt_ms"].to_numpy(np.float64)
    return {
        name: (float(ttft) / 1000, float(tbt) / 1000)
        for name, ttft, tbt in zip(names, ttft_ms, tbt_ms, strict=True)
    }


def load_length_pools() -> tuple[dict[str, NDArray[np.int64]], dict[str, Any]]:
    """Return output lengths per type from the Azure conv trace, split by partition b."""
    thresholds = pd.read_csv(data_path("freesh", "partitions.csv"))
    row_b = thresholds[thresholds["partition"] == "b"]
    input_cut = int(row_b["input_threshold_tokens"].to_numpy(np.int64)[0])
    output_cut = int(row_b["output_threshold_tokens"].to_numpy(np.int64)[0])
    trace = pd.read_csv(data_path("traces", "AzureLLMInferenceTrace_conv.csv"))
    trace = trace[(trace.ContextTokens <= 4096) & (trace.GeneratedTokens.between(1, 4096))]
    long_in = trace.ContextTokens >= input_cut
    long_out = trace.GeneratedTokens >= output_cut
    pools: dict[str, NDArray[np.int64]] = {}
    info: dict[str, Any] = {}
    for name in TYPES:
        out_mask = long_out if name[1] == "L" else ~long_out
        in_mask = long_in if name[0] == "L" else ~long_in
        chosen = trace.GeneratedTokens[in_mask & out_mask].to_numpy(np.int64)
        fallback = chosen.size == 0
        if fallback:
            chosen = trace.GeneratedTokens[out_mask].to_numpy(np.int64)
        pools[name] = chosen
        info[name] = {
            "pool_size": int(chosen.size),
            "mean_output_tokens": round(float(chosen.mean()), 1),
            "fallback_output_class_only": fallback,
        }
    return pools, info


def _workload(
    qps: float, requests: int, pool: NDArray[np.int64], seed: int
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    # Seeded per QPS as the public simulator does (seed + int(10·QPS)); first arrival at 0.
    rng = np.random.default_rng(seed + int(qps * 10))
    arrivals = np.cumsum(rng.exponential(1.0 / qps, requests))
    lengths = np.random.default_rng(seed + int(qps * 10) + 12345).choice(pool, requests)
    return arrivals - arrivals[0], lengths.astype(np.int64)


def _one_cell(
    policy: str,
    arrivals: NDArray[np.float64],
    lengths: NDArray[np.int64],
    ttft_s: float,
    tbt_s: float,
    config: TickSimConfig,
) -> dict[str, float | None]:
    n = arrivals.size
    result = simulate_ticks(
        policy.lower(),
        arrival_s=arrivals,
        true_output_tokens=lengths,
        predicted_output_tokens=lengths,  # oracle lengths, as the public simulator uses
        ttft_s=np.full(n, ttft_s),
        tbt_s=np.full(n, tbt_s),
        request_class="x",
        config=config,
    )
    summary = summarize(result.columns).overall
    jain = summary.jain
    return {
        "violation_pct": round(100 * summary.violation_rate, 1),
        "ttft_s": None if summary.ttft.count == 0 else round(summary.ttft.mean, 2),
        "jain_eq9": None if np.isnan(jain) else round(jain, 2),
        "jain_gap": round(
            gap_fairness(result.gap_fairness_produced, result.gap_fairness_backlogged), 2
        ),
        "max_waiting_s": round(summary.avg_max_waiting_s, 2),
    }


def _paper_cell(qps: float, name: str, policy_index: int) -> dict[str, float] | None:
    table = PAPER_TABLE5.get(int(qps)) if float(qps).is_integer() else None
    if table is None:
        return None
    return {metric: rows[name][policy_index] for metric, rows in table.items()}


def _checks(results: dict[str, Any]) -> dict[str, Any]:
    """Seed 000 §7.2 B qualitative targets, computed from our numbers."""
    cells = [
        (qps, name, policy, cell["ours"])
        for qps, by_type in results.items()
        for name, by_policy in by_type.items()
        for policy, cell in by_policy.items()
    ]
    fcfs = [c["violation_pct"] for _, _, p, c in cells if p == "FCFS"]
    others = [c["violation_pct"] for _, _, p, c in cells if p != "FCFS"]
    ratios = [
        by_type[name]["FCFS"]["ours"]["ttft_s"] / by_type[name]["LLF"]["ours"]["ttft_s"]
        for by_type in results.values()
        for name in ("SL", "LL")
        if by_type[name]["LLF"]["ours"]["ttft_s"]
    ]
    llf_jain = [c["jain_gap"] for _, name, p, c in cells if p == "LLF" and name in ("SL", "LL")]
    return {
        "fcfs_violation_pct_range": [min(fcfs), max(fcfs)],
        "paper_fcfs_violation_pct_range": [11, 29],
        "edf_srtf_llf_violation_pct_max": max(others),
        "paper_edf_srtf_llf_violation_pct_max": 3,
        "fcfs_over_llf_ttft_long_output": [round(r, 1) for r in ratios],
        "paper_fcfs_over_llf_ttft_long_output": [5.9, 3.7, 4.3, 3.7],
        "llf_jain_gap_sl_ll": llf_jain,
        "paper_llf_jain_sl_ll": [1.0, 1.0, 1.0, 1.0],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every (QPS, type, policy) cell and return ours beside FREESH Table 5."""
    profiles = load_profiles(args.profiles)
    pools, pool_info = load_length_pools()
    config = TickSimConfig(slots=args.slots, tick_s=args.tick_s, model_prefill=args.model_prefill)
    results: dict[str, Any] = {}
    for qps in args.qps:
        by_type: dict[str, Any] = {}
        for name in TYPES:
            arrivals, lengths = _workload(qps, args.requests, pools[name], args.seed)
            ttft_s, tbt_s = profiles[name]
            by_type[name] = {
                policy: {
                    "ours": _one_cell(policy, arrivals, lengths, ttft_s, tbt_s, config),
                    "paper": _paper_cell(qps, name, index),
                }
                for index, policy in enumerate(POLICIES)
            }
            print(f"qps {qps:g} {name}: done", file=sys.stderr)
        results[f"{qps:g}"] = by_type
    return {
        "setting": {
            "requests": args.requests,
            "slots": args.slots,
            "tick_s": args.tick_s,
            "seed": args.seed,
            "profiles": args.profiles,
            "ttft_tbt_s": {k: [round(v, 5) for v in p] for k, p in profiles.items()},
            "model_prefill": args.model_prefill,
            "lengths": "Azure conv trace split by partition-b thresholds (25 in / 232 out)",
            "length_pools": pool_info,
            "predictions": "oracle (true lengths), as the public FREESH simulator",
            "jain_eq9": "FREESH Eq. 9: 4 output-length quartile clients, tokens within 1.4·Lat",
            "jain_gap": "public simulator: 1 − max backlogged gap / mean service, RR clients",
            "paper_jain": "Table 5 Jain; the public simulator computes the gap metric",
        },
        "results": results,
        "checks": _checks(results),
    }
