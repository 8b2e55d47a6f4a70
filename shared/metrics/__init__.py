"""Metric definitions shared by the live load generator and the offline simulator.

Records (:mod:`shared.metrics.records`), latency percentiles and SLO violation
(:mod:`shared.metrics.latency`, FREESH Eq. 10), fairness (:mod:`shared.metrics.fairness`,
FREESH Eq. 9), energy and emissions (:mod:`shared.metrics.energy`), and the one run summary
(:mod:`shared.metrics.summary`).
"""

from __future__ import annotations

from shared.metrics.energy import co2_kg, energy_j_from_power, tokens_per_joule
from shared.metrics.fairness import gap_fairness, jain_index, quartile_jain
from shared.metrics.latency import LatencyStats, latency_stats, max_waiting_s, violations
from shared.metrics.records import RecordColumns, RequestRecord, RequestStatus, to_columns
from shared.metrics.summary import ClassSlo, ClassSummary, EnergyAccount, RunSummary, summarize

__all__ = [
    "ClassSlo",
    "ClassSummary",
    "EnergyAccount",
    "LatencyStats",
    "RecordColumns",
    "RequestRecord",
    "RequestStatus",
    "RunSummary",
    "co2_kg",
    "energy_j_from_power",
    "gap_fairness",
    "jain_index",
    "latency_stats",
    "max_waiting_s",
    "quartile_jain",
    "summarize",
    "to_columns",
    "tokens_per_joule",
    "violations",
]
