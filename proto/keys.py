"""Redis key names, namespaced like subjects so stacks and tests never collide."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Keys"]


@dataclass(frozen=True, slots=True)
class Keys:
    """All Redis keys of one stack."""

    prefix: str = "gs"

    def worker(self, worker_id: str) -> str:
        """Worker registration: its encoded WorkerStats, with a TTL renewed by each heartbeat."""
        return f"{self.prefix}:worker:{worker_id}"

    def ended(self, worker_id: str) -> str:
        """Sorted set request id → wall time a worker ended it (completion or error): what
        a router adopting placements needs once the worker is gone, and where the router and
        the scheduler find endings whose ``request.done`` they missed."""
        return f"{self.prefix}:ended:{worker_id}"

    @property
    def ended_pattern(self) -> str:
        """Pattern over every worker's ended set (read access for routers and schedulers)."""
        return f"{self.prefix}:ended:*"

    @property
    def worker_pattern(self) -> str:
        """SCAN pattern over every registered worker."""
        return f"{self.prefix}:worker:*"

    @property
    def plan(self) -> str:
        """The current plan, encoded."""
        return f"{self.prefix}:plan"

    def forecast(self, region: str) -> str:
        """The latest forecast of one region, encoded."""
        return f"{self.prefix}:forecast:{region}"

    def forecast_log(self, region: str) -> str:
        """Hash origin hour → the point forecast issued then (the forecaster's recent band)."""
        return f"{self.prefix}:forecast_log:{region}"

    @property
    def queued(self) -> str:
        """Hash request_id → encoded ClassifiedRequest held by the scheduler."""
        return f"{self.prefix}:queued"

    @property
    def dispatched(self) -> str:
        """Hash request_id → encoded Assignment (handed to the router, not yet done)."""
        return f"{self.prefix}:dispatched"

    def seen(self, request_id: str) -> str:
        """Marker that a request id entered the scheduler once (deduplication)."""
        return f"{self.prefix}:seen:{request_id}"

    def cancelled(self, request_id: str) -> str:
        """Marker (short TTL) that a request's client cancelled it: checked where the request
        is handed to the scheduler, so a cancel that came first still ends it."""
        return f"{self.prefix}:cancelled:{request_id}"

    def store_marker(self, owner: str) -> str:
        """Marker an owner of in-memory state (``scheduler``, ``router``) sets in Redis: gone,
        Redis lost its data (restarted empty) and the owner writes back what it holds."""
        return f"{self.prefix}:marker:{owner}"

    def revoked(self, worker_id: str) -> str:
        """Hash request id → wall time the router took the request from this worker (it went
        silent) to run it elsewhere: the worker, back from a freeze, aborts those it holds."""
        return f"{self.prefix}:revoked:{worker_id}"

    @property
    def stack(self) -> str:
        """Hash describing an embedded stack started by ``greenserve up``."""
        return f"{self.prefix}:stack"
