"""Worker service: one engine backend behind the dispatch subject, run until stopped.

The shim owns the bus; a backend (:mod:`services.worker.backend`) owns the engine: ``sim``
runs the calibrated engine model in-process in model time sped up by ``clock.speedup``,
``instant`` completes every request at once (control-plane benchmarks), ``vllm`` drives a
vLLM server (or ``greenserve sim-engine``) over HTTP. Tokens stream to the client's reply
subject, the first at once and later ones coalesced; completions also go to
``request.done``. The worker registers in Redis with a heartbeat TTL, and on shutdown stops
accepting, lets running requests finish within the shutdown timeout, hands the rest back
to the scheduler, and deregisters. Under a MILP plan a worker beyond its pool's planned
instances parks (:mod:`shared.domain.plan`): it refuses new dispatches, finishes what
it has and idles until the plan needs it again.

This module is what ``python -m services.worker`` and the in-process runner call
(:func:`serve`): it builds the backend and the shim, subscribes the shim's handlers and runs
its loops until ``ctx.stop``, then drains. The shim itself is :mod:`.shim`; what it hands
off: :mod:`.publisher` (publishes, the re-send after an outage), :mod:`.completions`
(completions, finished-request memory), :mod:`.registration` (heartbeat), :mod:`.drain`
(hand-back of unfinished requests).
"""

from __future__ import annotations

import asyncio
import contextlib

from proto.messages import ClassifiedRequest, ClockCommand, DispatchBatch
from services.worker.factory import build_backend
from services.worker.shim import NAME, WorkerShim
from services.worker.state_publisher import PREDICTIVE_MODE, publish_states
from shared.bus import serve as serve_subject
from shared.lifecycle import ServiceContext
from shared.plan_watch import watch_plan

__all__ = ["NAME", "WorkerShim", "serve"]


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set, then drain."""
    backend = build_backend(ctx.settings)
    shim = WorkerShim(ctx, backend)
    await backend.start(shim)
    try:
        await _serve_with(ctx, shim)
    finally:
        await backend.close()


async def _serve_with(ctx: ServiceContext, shim: WorkerShim) -> None:
    wid = ctx.settings.worker.worker_id
    subs = [
        await serve_subject(
            ctx.nc,
            ctx.subjects.worker_dispatch(wid),
            ClassifiedRequest,
            shim.on_dispatch,
            service=NAME,
        ),
        # Clock commands: the node-bound v2 subject, and v1 for one more version.
        await serve_subject(
            ctx.nc,
            ctx.subjects.worker_clock_v2(ctx.settings.worker.node_id, wid),
            ClockCommand,
            shim.on_clock,
            service=NAME,
        ),
        await serve_subject(
            ctx.nc,
            ctx.subjects.worker_dispatch_batch(wid),
            DispatchBatch,
            shim.on_dispatch_batch,
            service=NAME,
            carries=lambda batch, _reply: [req.trace for req in batch.requests],
        ),
        await serve_subject(
            ctx.nc, ctx.subjects.worker_clock(wid), ClockCommand, shim.on_clock, service=NAME
        ),
        # Every client's cancels: the router does not say which worker holds a request.
        await ctx.nc.subscribe(ctx.subjects.cancel_wildcard, cb=shim.on_cancel),
        # Every client's asks for endings it missed while moving to another NATS node.
        await ctx.nc.subscribe(ctx.subjects.resend_wildcard, cb=shim.on_resend),
        # Its pool's peers only: they are whom it ranks against to park.
        await ctx.nc.subscribe(
            ctx.subjects.worker_stats_pool_wildcard(ctx.settings.worker.pool_id),
            cb=shim.on_peer_stats,
        ),
        await watch_plan(ctx, shim.on_plan),
    ]
    ended_stop = asyncio.Event()  # after the drain: what ends while draining is recorded too
    async with asyncio.TaskGroup() as tg:
        tg.create_task(shim.ended_log.run(ended_stop))
        engine_task = tg.create_task(shim.backend.run())
        flush_task = tg.create_task(shim.flush_loop())
        resend_task = tg.create_task(shim.resend_loop())
        tg.create_task(shim.heartbeat())
        tg.create_task(shim.leases.beat(ctx.stop))
        if ctx.settings.dvfs.mode == PREDICTIVE_MODE:  # per-request state for the dvfs agent
            tg.create_task(publish_states(ctx, shim.book.streams, shim.backend.snapshot))
        await ctx.stop.wait()
        await shim.drain(ctx.settings.shutdown_timeout_s)
        ended_stop.set()
        engine_task.cancel()
        flush_task.cancel()
        resend_task.cancel()
    for sub in subs:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
