"""Energy and CO2 per answered request, as the gateway reports them to clients.

The same figures travel in ``usage`` (``gpu_energy_joules``, ``co2_grams``), in the
``X-GreenServe-Energy-Joules`` / ``X-GreenServe-CO2-Grams`` headers and here, so an operator's
dashboard and a client's bill agree.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = ["REQUEST_CO2_G", "REQUEST_ENERGY_J", "observe_footprint"]

REQUEST_ENERGY_J: Histogram = Histogram(
    "greenserve_request_energy_joules",
    "GPU energy attributed to each completed request (its share of every iteration it "
    "produced tokens in), as reported to the client in usage.gpu_energy_joules",
    buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
)
REQUEST_CO2_G: Counter = Counter(
    "greenserve_request_co2_grams_total",
    "CO2 of the completed requests' energy at their regions' intensity when each finished "
    "(requests whose worker had no forecast add nothing)",
)


def observe_footprint(energy_j: float, co2_g: float | None) -> None:
    """Record one completed request's footprint."""
    REQUEST_ENERGY_J.observe(energy_j)
    if co2_g is not None:
        REQUEST_CO2_G.inc(co2_g)
