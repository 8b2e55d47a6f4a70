"""Max-clock overrides of the dvfs agent: the scheduler's emergency ladder, rung 2.

DynamoLLM §4.4 asks the frequency controller for the instance's maximum clock when an SLO
miss is imminent. The scheduler sends a :class:`proto.messages.ClockOverride` for a pool
(or one worker); while it holds, every controller's choice for the matching workers is
replaced by the GPU's maximum clock, then control returns to the controller. Overrides are
bounded in time (``hold_s`` model seconds) so a scheduler that dies mid-emergency cannot
pin clocks forever. :class:`ClockOverrides` is pure (model time is passed in);
:func:`subscribe_overrides` is the agent's subscription.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from proto.codec import DecodeError, decode
from proto.messages import ClockOverride, WorkerStats
from shared.engine import gpu_spec
from shared.lifecycle import ServiceContext

__all__ = ["OVERRIDE_ISSUER", "ClockOverrides", "max_clock_of", "subscribe_overrides"]

logger = logging.getLogger(__name__)

OVERRIDE_ISSUER: Final = "scheduler"
"""The only identity whose overrides are honoured (the NATS ACL should also restrict
publishing on ``dvfs.override.*`` to the scheduler)."""


@dataclass(frozen=True, slots=True)
class _Hold:
    until_s: float
    worker_id: str | None


class ClockOverrides:
    """Active overrides by pool, each with its expiry in model time."""

    def __init__(self) -> None:
        self._by_pool: dict[str, _Hold] = {}

    def apply(self, override: ClockOverride, now_s: float) -> bool:
        """Record (or release, ``hold_s`` 0) an override; False when its issuer is not allowed."""
        if override.issued_by != OVERRIDE_ISSUER:
            return False
        if override.hold_s <= 0.0:
            self._by_pool.pop(override.pool_id, None)
        else:
            self._by_pool[override.pool_id] = _Hold(now_s + override.hold_s, override.worker_id)
        return True

    def active(self, pool_id: str, worker_id: str, now_s: float) -> bool:
        """Whether a worker of a pool must run at its maximum clock now."""
        hold = self._by_pool.get(pool_id)
        if hold is None:
            return False
        if now_s >= hold.until_s:
            del self._by_pool[pool_id]
            return False
        return hold.worker_id is None or hold.worker_id == worker_id

    def target(
        self, pool_id: str, worker_id: str, chosen_mhz: float, max_mhz: float, now_s: float
    ) -> float:
        """The clock to apply: the maximum while an override holds, else the controller's."""
        return max_mhz if self.active(pool_id, worker_id, now_s) else chosen_mhz


def max_clock_of(stats: WorkerStats) -> float:
    """The highest clock a worker's GPU supports (its current clock when the GPU is unknown)."""
    try:
        return gpu_spec(stats.gpu).max_clock_mhz
    except (KeyError, ValueError):
        return stats.clock_mhz


async def subscribe_overrides(
    ctx: ServiceContext,
    overrides: ClockOverrides,
    workers: Mapping[str, WorkerStats],
    set_clock: Callable[[str, float], Awaitable[None]],
) -> Subscription:
    """Record overrides as they arrive and raise the matching workers' clocks at once."""

    async def on_override(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            override = decode(msg.data, ClockOverride)
            now = ctx.clock.now()
            if not overrides.apply(override, now):
                logger.warning("ignored clock override from %r", override.issued_by)
                return
            for worker_id, stats in list(workers.items()):
                top = max_clock_of(stats)
                if overrides.active(stats.pool_id, worker_id, now) and stats.clock_mhz < top:
                    await set_clock(worker_id, top)

    return await ctx.nc.subscribe(ctx.subjects.dvfs_override_wildcard, cb=on_override)
