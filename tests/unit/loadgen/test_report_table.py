"""The replay report as a newcomer sees it at the end of ``make demo``."""

from __future__ import annotations

from rich.console import Console

from loadgen.report import print_report

REPORT = {
    "requests": 785,
    "completed": 785,
    "failed": 0,
    "lost": 0,
    "throughput_rps": 4.16,
    "energy_wh": 66.66,
    "co2_kg": 0.0167,
    "tokens_per_joule": 0.85,
    "p50_ttft_ms": 172.7,
    "p99_ttft_ms": 648.5,
    "p50_tbt_ms": 12.2,
    "p99_tbt_ms": 17.5,
    "p50_e2e_ms": 2818.5,
    "p99_e2e_ms": 7819.0,
    "p50_dispatch_overhead_ms": 4.05,
    "p99_dispatch_overhead_ms": 25.3,
    "slo_attainment": 1.0,
    "violation_rate": 0.0,
    "jain": 0.735,
    "errors": {},
}


def test_the_report_reads_whole_in_an_80_column_terminal() -> None:
    """Test that no header or value is cut short at 80 columns (``throughput`` was)."""
    console = Console(width=80, record=True)
    print_report(REPORT, console)
    text = console.export_text()
    assert "…" not in text
    assert "req/s" in text
    assert "4.16" in text
    assert "Jain fairness 0.735" in text
