"""Follow the current plan: read it from Redis at start, then listen for new ones."""

from __future__ import annotations

import logging
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from proto.codec import DecodeError, decode
from proto.messages import Plan
from shared.lifecycle import ServiceContext
from shared.store import as_bytes

__all__ = ["watch_plan"]

logger = logging.getLogger(__name__)


async def watch_plan(ctx: ServiceContext, on_plan: Callable[[Plan], None]) -> Subscription:
    """Call ``on_plan`` with the stored plan now (if any) and with every newer one."""
    latest = -1

    def accept(plan: Plan) -> None:
        nonlocal latest
        if plan.epoch < latest:
            return  # a late, older plan must never replace a newer one
        latest = plan.epoch
        on_plan(plan)

    async def on_msg(msg: Msg) -> None:
        try:
            accept(decode(msg.data, Plan))
        except DecodeError as exc:
            logger.warning("ignored malformed plan: %s", exc)

    sub = await ctx.nc.subscribe(ctx.subjects.plan, cb=on_msg)
    stored = await ctx.redis.get(ctx.keys.plan)
    if stored:
        try:
            accept(decode(as_bytes(stored), Plan))
        except DecodeError as exc:
            logger.warning("stored plan is malformed: %s", exc)
    return sub
