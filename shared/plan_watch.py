"""Follow the current plan: read it from Redis at start, then listen for new ones.

A plan on the bus is believed only up to a plausible epoch. The planner numbers epochs by
its model clock (``now // planner.epoch_s``), so a follower sharing that clock can tell an
epoch far in the future: accepted, it would pin the follower to that plan, because every
real plan after it is "older" and ignored. A plan more than
``planner.follower_max_epochs_ahead`` epochs past both the plan in force and the
follower's own clock is checked against the stored plan (``gs:plan``, which only the
planner may write): it is taken from the store when the store holds that epoch, and else
ignored and counted (``greenserve_errors_total{code="implausible_plan_epoch"}``). A planner
whose clock runs ahead of its followers' therefore still gets through, one store read per
plan, while a forged plan does not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from proto.codec import DecodeError, decode
from proto.messages import Plan
from shared.counters import ERRORS
from shared.lifecycle import ServiceContext
from shared.store import as_bytes

__all__ = ["IMPLAUSIBLE_PLAN_EPOCH", "epoch_limit", "watch_plan"]

logger = logging.getLogger(__name__)

IMPLAUSIBLE_PLAN_EPOCH: Final = "implausible_plan_epoch"
"""Error code counted when a plan on the bus is refused for its epoch."""


def epoch_limit(latest: int, model_now_s: float, epoch_s: float, max_ahead: int) -> int:
    """The highest plan epoch a follower believes without asking the store.

    Args:
        latest: epoch of the plan in force (-1: none yet).
        model_now_s: the follower's model time.
        epoch_s: the planner's epoch length (model seconds).
        max_ahead: how many epochs past the later of ``latest`` and the clock's epoch
            are still plausible (clock skew between processes, a planner that started
            its epoch a moment early).

    Raises:
        ValueError: ``epoch_s`` not positive or ``max_ahead`` negative.
    """
    if epoch_s <= 0 or max_ahead < 0:
        raise ValueError("epoch_s must be positive and max_ahead non-negative")
    return max(latest, int(model_now_s // epoch_s)) + max_ahead


async def watch_plan(ctx: ServiceContext, on_plan: Callable[[Plan], None]) -> Subscription:
    """Call ``on_plan`` with the stored plan now (if any) and with every newer one."""
    latest = -1
    planner = ctx.settings.planner

    def accept(plan: Plan) -> None:
        nonlocal latest
        if plan.epoch < latest:
            return  # a late, older plan must never replace a newer one
        latest = plan.epoch
        on_plan(plan)

    async def stored_plan() -> Plan | None:
        stored = await ctx.redis.get(ctx.keys.plan)
        if not stored:
            return None
        try:
            return decode(as_bytes(stored), Plan)
        except DecodeError as exc:
            logger.warning("stored plan is malformed: %s", exc)
            return None

    async def on_msg(msg: Msg) -> None:
        try:
            plan = decode(msg.data, Plan)
        except DecodeError as exc:
            logger.warning("ignored malformed plan: %s", exc)
            return
        limit = epoch_limit(
            latest, ctx.clock.now(), planner.epoch_s, planner.follower_max_epochs_ahead
        )
        if plan.epoch <= limit:
            accept(plan)
            return
        # Implausible on the bus alone: only the store (the planner's own key) can vouch.
        stored = await stored_plan()
        if stored is not None and stored.epoch == plan.epoch:
            accept(stored)
            return
        ERRORS.labels(ctx.name, IMPLAUSIBLE_PLAN_EPOCH).inc()
        logger.warning(
            "ignored plan of epoch %d: more than %d epochs ahead of %d and not in the store",
            plan.epoch,
            planner.follower_max_epochs_ahead,
            limit - planner.follower_max_epochs_ahead,
        )

    sub = await ctx.nc.subscribe(ctx.subjects.plan, cb=on_msg)
    # The stored plan needs no epoch check: only the planner may write its key.
    stored = await stored_plan()
    if stored is not None:
        accept(stored)
    return sub
