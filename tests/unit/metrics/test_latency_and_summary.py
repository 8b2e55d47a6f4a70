"""Tests for latency metrics, the run summary and energy conversions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared.metrics import (
    ClassSlo,
    EnergyAccount,
    RequestRecord,
    RequestStatus,
    co2_kg,
    energy_j_from_power,
    latency_stats,
    max_waiting_s,
    summarize,
    to_columns,
    violations,
)
from shared.metrics.energy import lb_per_mwh_to_g_per_kwh


def _record(
    rid: str,
    cls: str,
    arrival: float,
    first: float | None,
    finish: float | None,
    tokens: int,
    lat: float,
    *,
    times: list[float] | None = None,
    status: RequestStatus = RequestStatus.OK,
) -> RequestRecord:
    return RequestRecord(
        request_id=rid,
        request_class=cls,
        arrival_s=arrival,
        first_token_s=first,
        finish_s=finish,
        output_tokens=tokens,
        predicted_output_tokens=tokens,
        latency_budget_s=lat,
        status=status,
        token_times_s=times,
    )


def test_latency_stats_match_numpy_percentiles_and_ignore_nan() -> None:
    """Test that latency stats use finite values only and numpy's percentile definition."""
    values = np.array([1.0, 2.0, 3.0, 4.0, np.nan, 100.0])
    stats = latency_stats(values)
    assert stats.count == 5
    assert stats.mean == pytest.approx(22.0)
    assert stats.p50 == pytest.approx(3.0)
    assert stats.p99 == pytest.approx(float(np.percentile([1, 2, 3, 4, 100], 99)))
    assert math.isnan(latency_stats(np.array([np.nan])).mean)


def test_violation_is_e2e_beyond_five_lat_or_not_completed() -> None:
    """Test that FREESH Eq. 10 flags late finishes and unfinished requests only."""
    records = [
        _record("ok", "SS", 0.0, 0.5, 5.0, 10, 1.0),
        _record("late", "SS", 0.0, 0.5, 5.01, 10, 1.0),
        _record("shed", "SS", 0.0, None, None, 0, 1.0, status=RequestStatus.SHED),
    ]
    assert violations(to_columns(records)).tolist() == [False, True, True]


def test_max_waiting_uses_largest_token_gap_when_token_times_exist() -> None:
    """Test that MaxWaiting is max(TTFT, largest inter-token gap) per request (App. C.4)."""
    records = [
        _record("a", "SS", 0.0, 1.0, 6.0, 3, 1.0, times=[1.0, 5.0, 6.0]),  # gap 4 > TTFT 1
        _record("b", "SS", 0.0, 3.0, 4.0, 3, 1.0, times=[3.0, 3.5, 4.0]),  # TTFT 3
    ]
    assert max_waiting_s(to_columns(records)).tolist() == [4.0, 3.0]


def test_summary_groups_by_class_and_reports_attainment_and_energy() -> None:
    """Test that the summary splits classes, applies class TTFT targets and energy ratios."""
    records = [
        _record("a", "SS", 0.0, 0.1, 1.0, 10, 1.0),
        _record("b", "SS", 0.0, 0.6, 1.5, 10, 1.0),
        _record("c", "LL", 0.0, 1.0, 100.0, 100, 10.0),
    ]
    summary = summarize(
        records,
        energy=EnergyAccount(energy_j=3600.0 * 2, co2_kg=0.5),
        class_slos={"SS": ClassSlo(ttft_s=0.5)},
    )
    assert set(summary.per_class) == {"SS", "LL"}
    assert summary.per_class["SS"].slo_attainment == pytest.approx(0.5)
    assert summary.per_class["LL"].violation_rate == pytest.approx(1.0)  # 100 s > 5·10 s
    assert summary.overall.slo_attainment == pytest.approx(1 / 3)
    assert summary.energy_wh == pytest.approx(2.0)
    assert summary.tokens_per_joule == pytest.approx(120 / 7200)
    assert summary.as_dict()["per_class"]["SS"]["ttft_s"]["count"] == 2
    assert summary.per_class["SS"].tbt.mean == pytest.approx((0.9 / 9 + 0.9 / 9) / 2)


def test_energy_integration_and_co2_units() -> None:
    """Test trapezoid energy, kg CO2 from gCO2/kWh and the PJM lb/MWh conversion."""
    energy = energy_j_from_power(np.array([0.0, 1800.0, 3600.0]), np.array([1000.0, 1000.0, 0.0]))
    assert energy == pytest.approx(1000.0 * 1800 + 500.0 * 1800)
    assert co2_kg(np.array([3.6e6]), np.array([400.0])) == pytest.approx(0.4)
    # FREESH: 4651.81 Wh at ≈1014 lb/MWh is ≈2.14 kg.
    g_per_kwh = lb_per_mwh_to_g_per_kwh(np.array([1014.0]))
    assert co2_kg(np.array([4651.81 * 3600]), g_per_kwh) == pytest.approx(2.14, abs=0.01)
