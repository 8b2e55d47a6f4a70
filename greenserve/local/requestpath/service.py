"""Co-located request path: classifier, scheduler and router on one event loop.

On a small machine every hop between processes is a process wake-up, and with ten Python
processes on two cores a wake-up can wait several milliseconds for a time slice
(``docs/performance.md``). Here the three request-path shells run in one process and hand
requests to each other by method call: the classifier's hand-off is
:meth:`SchedulerShell.submit`, the scheduler's "ready" wakes the router directly, and the
router's pull is :meth:`SchedulerShell.pull`. Only the ingress (JetStream), the dispatch to
workers and the completions still cross NATS, and one ``request.done`` subscription feeds
all three parts (the separate services decode each completion three times).

Durability is unchanged, because Redis still records every hand-off before its sender
forgets the request:

* a fetched message is acked only after :meth:`SchedulerShell.submit` stored it (atomic
  seen-mark + store), exactly as after a ``scheduler.submit`` reply;
* a pulled request stays in ``queued`` until the router has dispatched it; one transaction
  then moves it to ``dispatched`` with its worker. A crash in between leaves it in
  ``queued``, and the restarted process queues it again at once (a worker that already
  holds it accepts the repeat without running it twice).

On NATS the process serves only ``scheduler.requeue`` (workers hand drained requests back
there); ``scheduler.submit``, ``scheduler.pull`` and ``scheduler.ready`` are method calls
here (the emergency ladder's re-steer too), so its identity (role ``requestpath``,
``shared.security``) is the union of the three roles minus exactly those subjects, and a
secured stack runs it like any other service. Spans keep their services' tracer names
(``greenserve.classifier`` …), so a trace looks the same in both deployments.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry import trace

from proto.codec import DecodeError, request_endings
from proto.messages import ClassifiedRequest, Completion, SubmitBatchReply
from services.classifier import service as classifier
from services.router.service import RouterShell
from services.scheduler.service import SchedulerShell
from shared.bus import HOPS_KEY
from shared.lifecycle import ServiceContext
from shared.plan_watch import watch_plan

__all__ = ["NAME", "InMemoryScheduler", "serve"]

NAME = "requestpath"

READY_EVENT_PERIOD_S = 0.5
"""Most one ``scheduler.ready`` event per pool per this many wall seconds (for the planner,
whose drain grace is seconds long)."""

logger = logging.getLogger(__name__)


class InMemoryScheduler:
    """The router's link to a scheduler in the same process (a method call, no NATS)."""

    records_pull = False
    """Pulled requests stay in ``queued`` until the router records them as dispatched."""

    def __init__(self, scheduler: SchedulerShell) -> None:
        """Wrap the co-located scheduler."""
        self._scheduler = scheduler

    async def pull(self, pool_id: str, slots: int) -> tuple[list[ClassifiedRequest], int]:
        """Pop up to ``slots`` requests; Redis is written once they are placed."""
        return await self._scheduler.pull(pool_id, slots, record=False)

    async def requeue(self, requests: list[ClassifiedRequest]) -> None:
        """Queue requests again (unplaced, refused, orphaned)."""
        await self._scheduler.requeue(requests)

    def ended_unheard(self, request_ids: list[str]) -> None:
        """The scheduler forgets them as if their ``request.done`` had arrived."""
        for rid in request_ids:
            self._scheduler.ended(rid)


async def serve(ctx: ServiceContext) -> None:
    """Run classifier, scheduler and router until ``ctx.stop`` is set."""
    router: RouterShell | None = None
    announced: dict[str, float] = {}

    async def on_ready(pool_id: str) -> None:
        if router is not None:
            router.mark_ready(pool_id)
        # The planner still learns which pools hold queued work (it keeps an instance of a
        # busy pool when it parks): a ``scheduler.ready`` event, at most one per pool and
        # period, where the separate scheduler publishes one per hand-off.
        now = time.monotonic()
        if now - announced.get(pool_id, -math.inf) >= READY_EVENT_PERIOD_S:
            announced[pool_id] = now
            await ctx.nc.publish(ctx.subjects.scheduler_ready(pool_id), b"")

    scheduler = SchedulerShell(
        ctx, on_ready=on_ready, tracer=trace.get_tracer("greenserve.scheduler")
    )
    router = RouterShell(
        ctx, InMemoryScheduler(scheduler), tracer=trace.get_tracer("greenserve.router")
    )
    await scheduler.restore()
    core = classifier.build_core(ctx)

    async def on_done(msg: Msg) -> None:
        try:
            endings = request_endings(msg.data)
        except DecodeError:
            return
        for ended in endings:
            if isinstance(ended, Completion):
                core.observe(ended.input_tokens, ended.output_tokens)
            rid = getattr(ended, "request_id", None)
            if rid:
                scheduler.ended(rid)
                router.ended(rid)

    async def submit(requests: list[ClassifiedRequest]) -> SubmitBatchReply:
        reply = await scheduler.submit(requests)
        # --- opt-in hop stamps (bench --hops): stored in Redis. The queued request shares
        # this ``trace`` dict, and the router cannot pull before this task yields. ---
        for req in requests:
            if HOPS_KEY in req.trace:
                req.trace[HOPS_KEY] += f",stored={time.time():.6f}"
        # --- end hop stamps ---
        return reply

    subs: list[Subscription] = [
        await watch_plan(ctx, classifier.plan_follower(core)),
        await ctx.nc.subscribe(ctx.subjects.request_done_wildcard, cb=on_done),
        *await scheduler.serve_subjects(requeue_only=True),
        *await router.subscribe(done=False, ready=False),
    ]
    await router.adopt()  # what this process placed before it restarted
    logger.info("request path co-located: classifier, scheduler and router in one process")
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(scheduler.run(subs))
            tg.create_task(router.run())
            tg.create_task(
                classifier.consume(ctx, core, submit, trace.get_tracer("greenserve.classifier"))
            )
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
