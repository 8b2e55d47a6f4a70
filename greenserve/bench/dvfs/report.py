"""The report of ``greenserve bench dvfs``: both settings, the notes that read them, and
a summary of the rows the docs quote (``docs/dvfs.md``), papers' figures beside ours."""

from __future__ import annotations

from typing import Any, Final

__all__ = ["CALIBRATION_NOTES", "NOTES", "build_report", "summary"]

NOTES: Final = [
    "The engine's clock model is fitted, not measured on FREESH's GPU (docs/engine.md): "
    "a voltage floor, a soft memory knee and a clock-independent active power, fitted to "
    "throttLL'eM's A100 and Ma et al.'s decode saving; our A100-80GB baseline also draws "
    "more power than FREESH's A100 40GB.",
    "FREESH-setting violations are E2E > 7 s of the longest SS requests (conv-trace SS "
    "outputs average ~138 tokens, FREESH's imply ~70); MIAD's E2E trigger fires late.",
    "throttLL'eM setting: predictive-paper (Eq. 1 projection without arrivals, "
    "decode-only model) over-throttles at load; predictive adds the prefill budget, "
    "the observed arrival stream and the model's held-out p95 time error as margin. "
    "late_also_at_max_clock counts the misses no clock could avoid. See docs/dvfs.md.",
    "profile-filter is DynamoLLM's instance manager (every 5 s: drop the profiled "
    "clocks whose P99 TTFT or TBT breaks the SLO at the measured load, take the least "
    "power) on a profile swept on the engine simulator with the workload's lengths; "
    "it has no E2E term, as published. profile-dynamollm adds its emergency step 2 "
    "(maximum clock for a period after a request within 10 % of a bound; the detector "
    "is ours), profile also the profiled P99 E2E against the setting's E2E SLO "
    "(GreenServe's extension).",
]
"""How to read the figures (in every report, after the settings)."""

CALIBRATION_NOTES: Final = {
    "poisson": "throttLL'eM setting, --calibration poisson (the default): the E2E SLO is "
    "the p99 E2E of constant-rate Poisson arrivals at the max load at max clock (MLPerf "
    "server scenario, as throttLL'eM profiles it), so the trace replay has headroom.",
    "trace": "throttLL'eM setting, --calibration trace: the E2E SLO is the max-clock run's "
    "own p99 on this trace, so max clock sits exactly at it and any added miss breaks "
    "'p99 within SLO'.",
}
"""What the throttLL'eM setting's E2E SLO is, by ``--calibration`` (the report says which)."""


def build_report(
    gpu: str,
    model: str,
    accuracy: dict[str, Any],
    freesh: dict[str, Any],
    throttllem: dict[str, Any],
    margin: float,
) -> dict[str, Any]:
    """The whole report: engine, IPS-model accuracy, both settings, notes, summary."""
    return {
        "engine": {
            "gpu": gpu,
            "model": model,
            "tp": 1,
            "clock_model": "fitted, see docs/engine.md",
        },
        "ips_model": accuracy,
        "freesh_table10": freesh,
        "throttllem": throttllem,
        "notes": [*NOTES, CALIBRATION_NOTES[throttllem["calibration"]]],
        "summary": summary(freesh, throttllem, margin),
    }


def summary(freesh: dict[str, Any], throttllem: dict[str, Any], margin: float) -> dict[str, Any]:
    """The headline figures of both settings (``margin``: predictive control's time margin)."""
    f_cfg, t_cfg = freesh["configs"], throttllem["configs"]
    return {
        "miad_energy_saving_pct": f_cfg["miad-2.0-100"]["energy_saving_pct"],
        "miad_violation_pct": f_cfg["miad-2.0-100"]["violation_pct"],
        "fixed_violation_pct": f_cfg["fixed-1410"]["violation_pct"],
        "paper_miad_energy_saving_pct": 51.9,
        "paper_miad_violation_pct": 0.34,
        "predictive_energy_saving_pct": t_cfg["predictive"]["energy_saving_pct"],
        "predictive_violation_pct": t_cfg["predictive"]["violation_pct"],
        "predictive_p99_e2e_within_slo": t_cfg["predictive"]["p99_e2e_within_slo"],
        "paper_predictive_energy_saving_pct": 24.7,
        "predictive_prefill_energy_saving_pct": t_cfg["predictive-prefill"]["energy_saving_pct"],
        "predictive_prefill_violation_pct": t_cfg["predictive-prefill"]["violation_pct"],
        "predictive_p99_e2e_s": t_cfg["predictive"]["p99_e2e_s"],
        "throttllem_e2e_slo_s": throttllem["e2e_slo_s"],
        "fixed_violation_pct_throttllem_setting": t_cfg["fixed-1410"]["violation_pct"],
        "predictive_late_also_at_max_clock": t_cfg["predictive"]["late_also_at_max_clock"],
        "predictive_late_requests": t_cfg["predictive"]["late_requests"],
        "predictive_paper_energy_saving_pct": t_cfg["predictive-paper"]["energy_saving_pct"],
        "predictive_paper_violation_pct": t_cfg["predictive-paper"]["violation_pct"],
        "predictive_margin": round(margin, 4),
        "predictive_energy_saving_pct_freesh_setting": f_cfg["predictive"]["energy_saving_pct"],
        "miad_energy_saving_pct_throttllem_setting": t_cfg["miad-2.0-100"]["energy_saving_pct"],
        "profile_filter_energy_saving_pct": f_cfg["profile-filter"]["energy_saving_pct"],
        "profile_filter_violation_pct": f_cfg["profile-filter"]["violation_pct"],
        "profile_dynamollm_energy_saving_pct": f_cfg["profile-dynamollm"]["energy_saving_pct"],
        "profile_dynamollm_violation_pct": f_cfg["profile-dynamollm"]["violation_pct"],
        "profile_energy_saving_pct": f_cfg["profile"]["energy_saving_pct"],
        "profile_violation_pct": f_cfg["profile"]["violation_pct"],
        "profile_dynamollm_energy_saving_pct_throttllem_setting": t_cfg["profile-dynamollm"][
            "energy_saving_pct"
        ],
        "profile_dynamollm_violation_pct_throttllem_setting": t_cfg["profile-dynamollm"][
            "violation_pct"
        ],
        "profile_energy_saving_pct_throttllem_setting": t_cfg["profile"]["energy_saving_pct"],
        "profile_violation_pct_throttllem_setting": t_cfg["profile"]["violation_pct"],
    }
