"""Planner shell: publish a plan every epoch.

``planner.mode = milp`` (the default) plans each epoch with FREESH Eq. 1 and a clock
dimension from live inputs (:mod:`services.planner.live_service`); ``planner.mode =
static`` publishes the pools of the settings. Each plan goes out on ``plan.current`` and into
Redis, so services that start later follow it.
"""

from __future__ import annotations

import contextlib
import logging
import time

from proto.codec import encode
from proto.messages import Plan, PoolPlan, RouteWeight
from services.planner.live_service import LivePlanner
from shared.config import PlannerSettings
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic

__all__ = ["MODES", "NAME", "serve", "static_plan"]

NAME = "planner"
MODES = ("static", "milp")

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
    if cfg.mode not in MODES:
        raise ValueError(f"planner mode {cfg.mode!r} is not available; use one of {MODES}")
    epoch_wall_s = ctx.clock.wall_period(cfg.epoch_s)
    if cfg.mode == "milp":
        await _serve_milp(ctx, LivePlanner(ctx))
        return
    current: list[Plan] = []

    async def publish() -> None:
        epoch = int(ctx.clock.now() // cfg.epoch_s)
        if not current or current[0].epoch != epoch:
            current[:] = [static_plan(cfg, epoch, time.time(), epoch_wall_s)]
            logger.info("plan epoch %d with %d pools", epoch, len(current[0].pools))
        await _publish(ctx, current[0])

    await run_periodic(
        ctx.stop,
        lambda: min(cfg.republish_wall_s, epoch_wall_s),
        publish,
        service=NAME,
        name="plan",
    )


async def _publish(ctx: ServiceContext, plan: Plan) -> None:
    payload = encode(plan)
    await ctx.redis.set(ctx.keys.plan, payload)
    await ctx.nc.publish(ctx.subjects.plan, payload)


async def _serve_milp(ctx: ServiceContext, live: LivePlanner) -> None:
    cfg = ctx.settings.planner
    epoch_wall_s = ctx.clock.wall_period(cfg.epoch_s)
    subs = [
        await ctx.nc.subscribe(ctx.subjects.request_done_wildcard, cb=live.on_done),
        await ctx.nc.subscribe(ctx.subjects.scheduler_ready_wildcard, cb=live.on_ready),
    ]

    # A failed plan is retried after a backoff that doubles up to an epoch: not only at the
    # next epoch (a Redis blip at the boundary left the last epoch's plan in force for a
    # whole epoch), and not on every republish tick either (a plan that always fails would
    # keep the solver busy).
    planned = -1  # the epoch of the last plan that succeeded
    failures = 0
    retry_at = 0.0  # monotonic

    async def publish() -> None:
        nonlocal planned, failures, retry_at
        epoch = int(ctx.clock.now() // cfg.epoch_s)
        due = epoch != planned or live.bootstrapping or live.wants_replan()
        if due and time.monotonic() >= retry_at:
            try:
                await live.plan_epoch(epoch)
                planned, failures = epoch, 0
            except Exception:
                # Keep the last good plan (never an empty route table) until a retry works.
                failures += 1
                backoff = min(epoch_wall_s, cfg.republish_wall_s * 2**failures)
                retry_at = time.monotonic() + backoff
                if failures == 1:
                    logger.exception("planning epoch %d failed; keeping the last plan", epoch)
                else:
                    logger.warning(
                        "planning epoch %d failed again (%d times); retrying in %.3g s",
                        epoch, failures, backoff,
                    )  # fmt: skip
        elif not due:
            live.refresh()
        plan = live.plan or static_plan(cfg, max(epoch, 0), time.time(), epoch_wall_s)
        await _publish(ctx, plan)

    try:
        await run_periodic(
            ctx.stop,
            lambda: min(cfg.republish_wall_s, epoch_wall_s),
            publish,
            service=NAME,
            name="plan",
        )
    finally:
        await live.close()
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
