"""The profiler: QPS search, the simulated backend, and tables the planner can read."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from services.planner.freesh_instance import load_profiles_csv
from shared.engine.profile_sim import SimulatedProfileBackend, SimWindow
from shared.engine.profiler import (
    PROFILE_COLUMNS,
    LoadMeasurement,
    ProfileRow,
    ProfileSlo,
    ProfileTarget,
    RequestClass,
    UnsupportedTargetError,
    max_sustainable_qps,
    profile_sweep,
    write_profile_csv,
)
from shared.paths import data_path

_SHORT = RequestClass(
    partition="t", name="SS", prompt_tokens=(60, 120, 180), output_tokens=(40, 90, 150)
)
_H100 = ProfileTarget(gpu_type="H100", tp=4, model="llama-3-70b")
_QUICK = SimWindow(window_s=30.0, min_requests=40)


def _fake(qps: float) -> LoadMeasurement:
    return LoadMeasurement(qps=qps, power_w=100.0 * qps, ttft_s=(0.1,), tbt_s=(0.05,),
                           e2e_s=(1.0,), unfinished=0, clock_mhz=1000.0)  # fmt: skip


@pytest.mark.parametrize("boundary", [0.3, 7.3, 130.0])
def test_qps_search_finds_the_slo_boundary_within_tolerance(boundary: float) -> None:
    """Test that the search returns a QPS that meets the SLO and is within 5 % of the boundary."""
    qps, measurement = max_sustainable_qps(_fake, lambda m: m.qps <= boundary, start_qps=1.0)
    assert boundary * 0.95 <= qps <= boundary
    assert measurement.qps == qps


def test_qps_search_reports_zero_when_even_the_lowest_load_breaks_the_slo() -> None:
    """Test that an always-violated SLO gives max_qps 0 with a measurement at the lowest load."""
    qps, measurement = max_sustainable_qps(_fake, lambda m: False, min_qps=0.1)
    assert qps == 0.0
    assert 0.1 <= measurement.qps < 0.2


def test_slo_counts_unfinished_requests_and_uses_the_class_ttft_limit() -> None:
    """Test that unfinished requests break the SLO and TTFT limits differ by class."""
    slo = ProfileSlo()
    ttft_400ms = LoadMeasurement(qps=1.0, power_w=1.0, ttft_s=(0.4,) * 10, tbt_s=(0.05,),
                                 e2e_s=(1.0,), unfinished=0, clock_mhz=1.0)  # fmt: skip
    assert not slo.met_by("SS", ttft_400ms)
    assert slo.met_by("LS", ttft_400ms)
    unfinished = LoadMeasurement(qps=1.0, power_w=1.0, ttft_s=(0.1,), tbt_s=(0.05,),
                                 e2e_s=(1.0,), unfinished=1, clock_mhz=1.0)  # fmt: skip
    assert not slo.met_by("LS", unfinished)


def test_simulated_backend_sustains_light_load_and_gives_up_on_overload() -> None:
    """Test that light load meets the SLO with sane latencies while 50x overload breaks it."""
    backend = SimulatedProfileBackend(window=_QUICK)
    light = backend.measure(_H100, _SHORT, 1.0)
    assert ProfileSlo().met_by("SS", light)
    assert all(0.0 < t < e for t, e in zip(light.ttft_s, light.e2e_s, strict=False))
    assert 4 * 75.0 < light.power_w < 4 * 700.0
    heavy = backend.measure(_H100, _SHORT, 50.0 * backend.capacity_qps(_H100, _SHORT))
    assert not ProfileSlo().met_by("SS", heavy)
    assert heavy.unfinished > 0


def test_simulated_backend_rejects_a_model_that_does_not_fit() -> None:
    """Test that a 70B model on one GPU raises UnsupportedTargetError."""
    backend = SimulatedProfileBackend(window=_QUICK)
    with pytest.raises(UnsupportedTargetError):
        backend.measure(ProfileTarget(gpu_type="A100", tp=1, model="llama-3-70b"), _SHORT, 1.0)


def test_profile_table_has_the_freesh_header_and_loads_in_the_planner(tmp_path: Path) -> None:
    """Test that the CSV has FREESH's header plus clock_mhz and load_profiles_csv reads it."""
    long_class = RequestClass(partition="t", name="LL", prompt_tokens=(900, 1500),
                              output_tokens=(400, 600))  # fmt: skip
    targets = [
        ProfileTarget(gpu_type="A100", tp=1, model="llama-3-70b"),  # unsupported: skipped
        _H100,
        ProfileTarget(gpu_type="H100", tp=4, model="llama-3-70b", clock_mhz=990.0),
    ]
    seen: list[str] = []

    def record(target: ProfileTarget, cls: RequestClass, row: ProfileRow | None) -> None:
        seen.append(f"{target.mode}/{cls.name}/{row is not None}")

    rows = profile_sweep(SimulatedProfileBackend(window=_QUICK), targets, [_SHORT, long_class],
                         relative_tolerance=0.15, on_point=record)  # fmt: skip
    assert seen.count("A100-tp1/SS/False") == 1
    assert len(seen) == 6
    assert len(rows) == 4
    path = tmp_path / "profiles.csv"
    write_profile_csv(path, rows)
    with path.open(newline="") as handle:
        header = next(csv.reader(handle))
    with data_path("freesh", "profiles.csv").open(newline="") as handle:
        freesh_header = next(csv.reader(handle))
    assert header == [*freesh_header, "clock_mhz"] == list(PROFILE_COLUMNS)
    configs = load_profiles_csv(path)
    assert [(c.request_class, c.mode, c.clock_mhz) for c in configs] == [
        ("SS", "H100-tp4", 1980.0), ("LL", "H100-tp4", 1980.0),
        ("SS", "H100-tp4", 990.0), ("LL", "H100-tp4", 990.0),
    ]  # fmt: skip
    full, low = configs[0], configs[2]
    assert full.max_qps > 0
    assert full.gpus == full.tensor_parallel == 4
    assert low.power_w < full.power_w  # a lower clock draws less power
    assert all(c.tbt_ms > 0 and c.ttft_ms > 0 and c.e2e_s > 0 for c in configs)
