"""Metric names and label values as Prometheus's conventions (and ``promtool``) want them."""

from __future__ import annotations

import re

from prometheus_client import REGISTRY

import services.gateway.app
import services.gateway.flight
import services.router.recovery
import services.worker.gpu_meters
import shared.counters

NON_BASE_UNITS = re.compile(r"_(mhz|ghz|ms|us|minutes|hours|kwh|wh|kb|mb|gb|kg|celsius)(_|$)")
"""Unit suffixes Prometheus asks to replace by the base unit (hertz, seconds, joules...)."""
SNAKE_CASE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*$")


def _families() -> dict[str, str]:
    # Importing the modules registers their metrics (the names keep the imports used).
    assert services.gateway.app.HTTP_REQUESTS is not None
    assert services.router.recovery.ADOPTED is not None
    assert services.worker.gpu_meters.GPU_ENERGY_J is not None
    assert shared.counters.ERRORS is not None
    return {f.name: f.type for f in REGISTRY.collect() if f.name.startswith("greenserve_")}


def test_no_metric_is_named_in_a_non_base_unit() -> None:
    """Test every GreenServe metric's name: seconds, hertz, joules, grams, never MHz or ms
    (``greenserve_gpu_clock_mhz`` was one)."""
    families = _families()
    assert "greenserve_gpu_clock_hertz" in families
    assert [name for name in families if NON_BASE_UNITS.search(name)] == []


def test_cumulative_gpu_quantities_are_counters() -> None:
    """Test that energy, CO2 and model time, which only grow, are counters (exported with
    ``_total``), so that ``rate()`` handles a worker's restart."""
    families = _families()
    for name in ("gpu_energy_joules", "gpu_co2_grams", "gpu_model_seconds"):
        assert families[f"greenserve_{name}"] == "counter"


def test_the_gateways_cancel_reasons_are_snake_case_label_values() -> None:
    """Test the ``why`` values of ``greenserve_gateway_cancels_total`` (they had spaces)."""
    flight = services.gateway.flight
    whys = (flight.CLIENT_DISCONNECTED, flight.GATEWAY_TIMEOUT, flight.PUBLISH_FAILED)
    assert all(SNAKE_CASE.match(why) for why in whys)
