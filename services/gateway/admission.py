"""The gateway's ceiling: at most ``max_in_flight`` completion requests held at once.

A request over the ceiling is answered 429 ``overloaded`` with ``Retry-After`` before its
body is read, so overload costs the gateway a few microseconds and no memory per refused
request, and clients back off (as OpenAI's do on its 429s) instead of waiting minutes in
a queue that only grows. Without it, 10× capacity for a minute held every request until it
timed out and the gateway's memory grew with them.

Why the default is half the open-file limit: every held request holds its client's socket,
and once a process runs out of descriptors ``accept`` fails for every client, health checks
included, so the ceiling must sit below it; the other half stays for idle keep-alive
connections, connections being refused, NATS, Redis and log files.
"""

from __future__ import annotations

import resource
from typing import Final

from prometheus_client import Gauge

from services.gateway.errors import ApiError

__all__ = ["IN_FLIGHT", "InFlightLimit", "default_max_in_flight"]

IN_FLIGHT: Gauge = Gauge(
    "greenserve_gateway_in_flight_requests", "Completion requests the gateway holds now"
)

_UNLIMITED_FILES: Final = 1 << 20
"""What an unlimited open-file limit is taken as: Linux's default ``fs.nr_open``, the most
descriptors a process can have whatever its limit says."""


def default_max_in_flight() -> int:
    """Half this process's soft open-file limit (the module says why), at least 1."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = _UNLIMITED_FILES if soft == resource.RLIM_INFINITY else soft
    return max(1, files // 2)


class InFlightLimit:
    """Counts the requests held; refuses one over ``limit`` with ``overloaded``."""

    def __init__(self, limit: int, retry_after_s: float) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._limit = limit
        self._retry_after_s = retry_after_s
        self._held = 0

    @property
    def limit(self) -> int:
        """Most requests held at once."""
        return self._limit

    @property
    def held(self) -> int:
        """Requests held now."""
        return self._held

    def enter(self) -> None:
        """Hold one more request; pair with :meth:`leave`.

        Raises:
            ApiError: ``overloaded`` (429 with ``Retry-After``) at the limit.
        """
        if self._held >= self._limit:
            raise ApiError(
                "overloaded",
                f"the gateway holds its limit of {self._limit} requests; retry later",
                retry_after_s=self._retry_after_s,
            )
        self._held += 1
        IN_FLIGHT.inc()

    def leave(self) -> None:
        """Release a request held by :meth:`enter`."""
        self._held -= 1
        IN_FLIGHT.dec()
