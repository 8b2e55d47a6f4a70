"""Planner shell: publish a plan every epoch.

``planner.mode = static`` publishes the pools of the settings (the first, simple form);
the MILP core (FREESH Eq. 1 with a clock dimension) plugs in behind the same loop. Each
plan goes out on ``plan.current`` and into Redis, so services that start later follow it.
"""

from __future__ import annotations

import logging
import time

from proto.codec import encode
from proto.messages import Plan, PoolPlan, RouteWeight
from shared.config import PlannerSettings
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic

__all__ = ["NAME", "serve", "static_plan"]

NAME = "planner"

logger = logging.getLogger(__name__)


def static_plan(
    settings: PlannerSettings, epoch: int, now_wall: float, epoch_wall_s: float
) -> Plan:
    """The plan of the settings: every class routed to every pool, weighted by instances."""
    pools = [PoolPlan(**pool) for pool in settings.static_pools]
    routes = {
        "*": [
            RouteWeight(pool_id=p.pool_id, weight=float(p.instances))
            for p in pools
            if p.instances > 0
        ]
    }
    return Plan(
        epoch=epoch,
        issued_at=now_wall,
        valid_until=now_wall + epoch_wall_s,
        scheme=settings.scheme,
        pools=pools,
        routes=routes,
        objective="static",
    )


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set.

    The plan is recomputed once per epoch and re-published every ``republish_wall_s``, so a
    restarted Redis or a service that missed the event is back on the plan within seconds.
    """
    cfg = ctx.settings.planner
    if cfg.mode != "static":
        raise ValueError(f"planner mode {cfg.mode!r} is not available yet; use 'static'")
    epoch_wall_s = ctx.clock.wall_period(cfg.epoch_s)
    current: list[Plan] = []

    async def publish() -> None:
        epoch = int(ctx.clock.now() // cfg.epoch_s)
        if not current or current[0].epoch != epoch:
            current[:] = [static_plan(cfg, epoch, time.time(), epoch_wall_s)]
            logger.info("plan epoch %d with %d pools", epoch, len(current[0].pools))
        payload = encode(current[0])
        await ctx.redis.set(ctx.keys.plan, payload)
        await ctx.nc.publish(ctx.subjects.plan, payload)

    await run_periodic(
        ctx.stop,
        lambda: min(cfg.republish_wall_s, epoch_wall_s),
        publish,
        service=NAME,
        name="plan",
    )
