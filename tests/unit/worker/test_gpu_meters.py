"""A worker's GPU series: counters that only grow, hertz, and power right at any speed-up."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from services.worker.gpu_meters import GpuMeters, increment


def _value(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    assert value is not None, name
    return value


def test_a_running_total_that_goes_back_adds_nothing() -> None:
    """Test the increment of a counter fed by a running total: the gain, or 0 after a reset."""
    assert increment(10.0, 12.5) == 2.5
    assert increment(12.5, 3.0) == 0.0


def test_energy_and_co2_are_counters_and_power_reads_right_at_a_speed_up() -> None:
    """Test a simulated A100 idling at 63 W with a speed-up of 20: two exports one wall
    second apart (20 model seconds) give a clock in hertz, energy and CO2 totals that are
    the engine's, and rate(energy) / rate(model seconds) = 63 W, where rate(energy) per wall
    second reads 1,260 W."""
    meters = GpuMeters("w-speedup", "PJM", model_s=1000.0)
    meters.export(clock_mhz=1410.0, power_w=63.0, energy_j=0.0, co2_g=0.0, model_s=1000.0)
    worker = {"worker": "w-speedup"}
    energy_0 = _value("greenserve_gpu_energy_joules_total", **worker)
    model_0 = _value("greenserve_gpu_model_seconds_total", **worker)
    meters.export(clock_mhz=1005.0, power_w=63.0, energy_j=1260.0, co2_g=0.14, model_s=1020.0)
    energy_j = _value("greenserve_gpu_energy_joules_total", **worker) - energy_0
    model_s = _value("greenserve_gpu_model_seconds_total", **worker) - model_0
    assert energy_j == pytest.approx(1260.0)
    assert energy_j / model_s == pytest.approx(63.0)
    assert _value("greenserve_gpu_clock_hertz", **worker) == 1.005e9
    co2 = _value("greenserve_gpu_co2_grams_total", worker="w-speedup", region="PJM")
    assert co2 == pytest.approx(0.14)


def test_a_restarted_engine_counter_does_not_run_the_counter_backwards() -> None:
    """Test that an energy total lower than the last one adds nothing, and counting goes on
    from the new total."""
    meters = GpuMeters("w-reset", "CISO", model_s=0.0)
    meters.export(clock_mhz=1410.0, power_w=100.0, energy_j=500.0, co2_g=1.0, model_s=5.0)
    meters.export(clock_mhz=1410.0, power_w=100.0, energy_j=20.0, co2_g=1.0, model_s=6.0)
    meters.export(clock_mhz=1410.0, power_w=100.0, energy_j=120.0, co2_g=1.5, model_s=7.0)
    assert _value("greenserve_gpu_energy_joules_total", worker="w-reset") == 600.0
    assert _value("greenserve_gpu_model_seconds_total", worker="w-reset") == 7.0
