"""The published figures ``greenserve bench dvfs`` reports beside its own, and the MLPerf
limits its throttLL'eM setting calibrates against."""

from __future__ import annotations

from typing import Final

__all__ = [
    "MLPERF_MIN_DURATION_S",
    "MLPERF_TBT_P99_S",
    "MLPERF_TTFT_P99_S",
    "PAPER_TABLE10",
    "PAPER_THROTTLLEM",
]

PAPER_TABLE10: Final = {
    "fixed-1410": {
        "e2e_ms": (1520.67, 1987.36, 2414.20),
        "ttft_ms": (33.76, 40.47, 44.52),
        "tbt_ms": (20.62, 24.96, 28.19),
        "energy_wh": 83.917,
        "violation_pct": 0.11,
    },
    "miad-1.5-10": {
        "e2e_ms": (2866.98, 5050.61, 6008.65),
        "ttft_ms": (64.26, 127.43, 173.39),
        "tbt_ms": (39.84, 78.85, 106.93),
        "energy_wh": 42.426,
        "violation_pct": 0.33,
    },
    "miad-1.5-100": {
        "e2e_ms": (4151.74, 5999.28, 7290.99),
        "ttft_ms": (93.64, 169.15, 195.64),
        "tbt_ms": (56.27, 103.03, 122.68),
        "energy_wh": 38.571,
        "violation_pct": 0.49,
    },
    "miad-2.0-10": {
        "e2e_ms": (2497.30, 4448.84, 5640.99),
        "ttft_ms": (53.97, 105.68, 154.71),
        "tbt_ms": (33.33, 66.97, 95.55),
        "energy_wh": 45.351,
        "violation_pct": 0.31,
    },
    "miad-2.0-100": {
        "e2e_ms": (3424.21, 5520.42, 6510.17),
        "ttft_ms": (77.48, 159.10, 197.39),
        "tbt_ms": (46.89, 97.60, 120.10),
        "energy_wh": 40.401,
        "violation_pct": 0.34,
    },
}
"""FREESH Table 10 (Llama3-8B, 1× A100 40GB, 20 min SS): p50/p90/p99, energy, violation."""

PAPER_THROTTLLEM: Final = {
    "energy_saving_pct_mean": 24.7,
    "energy_saving_pct_max": 30.7,
    "mean_clock_mhz_range": (950, 1260),
    "p99_e2e_within_slo": True,
    "mean_tbt_within_slo": True,
    "llama3_8b_tp1": {"max_load_rps": 13.0, "e2e_slo_s": 37.7},
    "ips_model_llama3_8b_tp1": {"r2": 0.99, "mape_pct": 4.1, "mae_ips": 0.85},
}
"""throttLL'eM §6 (no autoscaling, averaged over engines), Table II and Table III."""

MLPERF_TTFT_P99_S: Final = 2.0
MLPERF_TBT_P99_S: Final = 0.2
"""Saturation limits of the max-load ramp (MLPerf server-scenario style)."""

MLPERF_MIN_DURATION_S: Final = 600.0
"""MLPerf's minimum server-scenario run (10 min): the Poisson ramp's length."""
