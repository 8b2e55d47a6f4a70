"""Unit tests of the read-only NVML reader and the worker's energy meter, on a fake NVML."""

from __future__ import annotations

import sys

import pytest

from services.worker.energy_meter import EnergyMeter
from services.worker.vllm_metrics import EngineMetrics
from shared.gpu import NvmlReader, NvmlReadError, NvmlUnavailableError, load_nvml
from tests.unit.worker.fake_nvml import FakeGpu, FakeNvml


def _two_gpus() -> FakeNvml:
    return FakeNvml(
        {
            0: FakeGpu(power_mw=250_000, energy_mj=1_000_000, sm_mhz=1410),
            1: FakeGpu(power_mw=150_000, energy_mj=2_000_000, sm_mhz=1395,
                       graphics_clocks=(1395, 1380, 210)),
        }
    )  # fmt: skip


def test_readings_are_summed_in_watts_and_joules_and_the_slowest_clock_is_reported() -> None:
    """Test that power and energy add over the instance's GPUs and the SM clock is the minimum."""
    nvml = _two_gpus()
    with NvmlReader([0, 1], nvml=nvml) as reader:
        assert reader.power_w() == pytest.approx(400.0)
        assert reader.energy_j() == pytest.approx(3000.0)
        assert reader.sm_clock_mhz() == 1395.0
        assert reader.supported_clocks_mhz() == (1380.0, 1395.0)
        assert [r.index for r in reader.read()] == [0, 1]
    assert not nvml.initialised


def test_the_reader_only_ever_queries_the_gpus() -> None:
    """Test that no NVML call outside the read-only surface is made (no clock is changed)."""
    nvml = _two_gpus()
    with NvmlReader([0, 1], nvml=nvml) as reader:
        reader.read()
        reader.supported_clocks_mhz()
    assert {c for c in nvml.calls if "Set" in c or "Reset" in c} == set()


def test_a_gpu_without_an_energy_counter_integrates_power_over_time() -> None:
    """Test that energy is the trapezoid integral of power when NVML has no counter."""
    gpu = FakeGpu(power_mw=100_000, energy_mj=None)
    now = [0.0]
    reader = NvmlReader([0], nvml=FakeNvml({0: gpu}), clock=lambda: now[0])
    assert reader.energy_j() == 0.0
    now[0] = 2.0
    gpu.power_mw = 300_000
    assert reader.energy_j() == pytest.approx(400.0)  # (100 + 300) / 2 W x 2 s
    reader.close()
    reader.close()  # idempotent


def test_nvml_failures_become_reader_errors_that_name_the_action() -> None:
    """Test that NVMLError is wrapped with what the reader was doing, and NVML is shut down."""
    nvml = FakeNvml({0: FakeGpu()})
    with pytest.raises(NvmlReadError, match="open GPU 3"):
        NvmlReader([3], nvml=nvml)
    assert not nvml.initialised
    with pytest.raises(ValueError, match="at least one"):
        NvmlReader([], nvml=nvml)


def test_a_missing_pynvml_gives_a_clear_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test that without nvidia-ml-py the error says what to install."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes any import of it fail
    with pytest.raises(NvmlUnavailableError, match="nvidia-ml-py"):
        load_nvml()


def test_an_nvml_meter_attributes_the_counter_increase_since_it_started() -> None:
    """Test that the meter starts at zero and hands out each increase of NVML's counter once."""
    nvml = _two_gpus()
    meter = EnergyMeter(NvmlReader([0, 1], nvml=nvml))
    assert meter.source == "nvml"
    assert meter.take() == 0.0
    nvml.gpus[0].energy_mj += 500_000  # type: ignore[operator]
    assert meter.take() == pytest.approx(500.0)
    assert meter.take() == 0.0
    assert meter.counter_j() == pytest.approx(500.0)
    assert meter.power_w() == pytest.approx(400.0)
    assert meter.clock_mhz() == 1395.0
    meter.close()


def test_scraped_energy_is_extrapolated_at_most_one_window_and_never_runs_backwards() -> None:
    """Test that between scrapes energy grows at the measured rate, capped, and stays monotone."""
    now = [0.0]
    meter = EnergyMeter(rate_window_s=1.0, clock=lambda: now[0])
    assert meter.source == "none"
    assert meter.take() == 0.0
    meter.observe(EngineMetrics(energy_j=1000.0, model_time_s=0.0, clock_mhz=1410.0))
    now[0] = 1.0
    meter.observe(EngineMetrics(energy_j=1100.0, model_time_s=10.0))  # 100 J per wall s
    assert meter.power_w() == pytest.approx(10.0)  # per model second
    assert meter.clock_mhz() == 1410.0
    assert meter.take() == pytest.approx(100.0)
    now[0] = 1.5
    assert meter.take() == pytest.approx(50.0)
    now[0] = 9.0  # scrapes stalled: extrapolation stops after one window
    assert meter.take() == pytest.approx(50.0)
    assert meter.counter_j() == pytest.approx(200.0)
    now[0] = 9.5
    meter.observe(EngineMetrics(energy_j=1150.0, model_time_s=15.0))  # below what was handed out
    assert meter.counter_j() == pytest.approx(200.0)
