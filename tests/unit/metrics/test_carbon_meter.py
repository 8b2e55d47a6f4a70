"""The running CO2 of a worker's energy counter, and the forecast value it is priced at."""

from __future__ import annotations

import pytest

from proto.messages import Forecast
from shared.metrics.energy import CarbonMeter


def test_each_energy_increment_is_priced_at_the_intensity_read_with_it() -> None:
    """Test 1 kWh at 400 g/kWh then 0.5 kWh at 200 g/kWh; an unknown intensity keeps its
    energy aside; a counter that falls (a restarted backend) starts a new baseline."""
    meter = CarbonMeter()
    assert meter.add(1.0e6, 400.0) == 0.0  # the first read is the baseline
    assert meter.add(1.0e6 + 3.6e6, 400.0) == pytest.approx(400.0)
    assert meter.add(1.0e6 + 5.4e6, 200.0) == pytest.approx(500.0)
    assert meter.add(1.0e6 + 9.0e6, None) == pytest.approx(500.0)
    assert meter.unknown_j == pytest.approx(3.6e6)
    assert meter.add(0.0, 300.0) == pytest.approx(500.0)
    assert meter.add(3.6e6, 300.0) == pytest.approx(800.0)


def test_a_forecast_gives_the_value_of_the_hour_a_time_falls_in() -> None:
    """Test inside, before and after the hourly values, and an empty forecast."""
    forecast = Forecast(
        region="PJM",
        issued_at=0.0,
        start_s=7200.0,
        step_s=3600,
        values=[100.0, 200.0, 300.0],
        p10=[90.0, 180.0, 270.0],
        p90=[110.0, 220.0, 330.0],
    )
    assert forecast.value_at(7200.0) == 100.0
    assert forecast.value_at(7200.0 + 3599.0) == 100.0
    assert forecast.value_at(7200.0 + 3600.0) == 200.0
    assert forecast.value_at(0.0) == 100.0
    assert forecast.value_at(1e9) == 300.0
    empty = Forecast(
        region="PJM", issued_at=0.0, start_s=0.0, step_s=3600, values=[], p10=[], p90=[]
    )
    assert empty.value_at(0.0) is None
