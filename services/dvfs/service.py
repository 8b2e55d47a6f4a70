"""DVFS agent shell: one per node; a clock controller per GPU instance, and power reports.

Modes: ``fixed`` (every instance at ``dvfs.clock_mhz``, or its maximum) and ``miad``
(FREESH Eq. 5: ×2 on congestion against Table 7, −100 MHz otherwise, every ``period_s``
of model time). Congestion is judged from the latencies of requests that finished on the
instance during the period. Clock changes go to the worker as ClockCommands; the worker's
backend applies them to the simulator (or, opt-in, through NVML). The predictive and
profile-based controllers need per-request state and profiles that the live workers do not
publish yet; they run in the offline simulator and ``bench dvfs``. A ClockOverride from the
scheduler's emergency ladder holds a pool at its maximum clock for a bounded time
(:mod:`services.dvfs.clock_override`). Under a MILP plan the
pool's planned clock caps every controller's choice
(:func:`services.planner.parking.pool_clock_caps`).
"""

from __future__ import annotations

import contextlib
import logging
import time

import nats.errors
from nats.aio.msg import Msg

from proto.codec import DecodeError, decode, decode_any, encode
from proto.messages import (
    ClockCommand,
    ClockReply,
    Completion,
    DvfsReport,
    GpuReport,
    Plan,
    WorkerStats,
)
from services.dvfs.clock_override import ClockOverrides, max_clock_of, subscribe_overrides
from services.dvfs.controller import ClockController, FixedClockController
from services.dvfs.miad import MiadConfig, MiadController
from services.dvfs.observations import LatencyCollector, observation_for
from services.planner.parking import pool_clock_caps
from shared.bus import request
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic
from shared.plan_watch import watch_plan

__all__ = ["ISSUER", "MODES", "NAME", "make_controller", "serve"]

NAME = "dvfs"
ISSUER = "dvfs"
MODES = ("fixed", "miad")
CLOCK_TOLERANCE_MHZ = 15.0
"""Clocks within one NVML step of the target count as applied."""

logger = logging.getLogger(__name__)


def make_controller(mode: str, clock_mhz: float | None, period_s: float) -> ClockController:
    """The controller of one instance for a dvfs mode.

    Raises:
        ValueError: for a mode the live agent does not run.
    """
    if mode == "fixed":
        return FixedClockController(clock_mhz, period_s)
    if mode == "miad":
        return MiadController(MiadConfig(period_s=period_s, max_clock_mhz=clock_mhz))
    raise ValueError(f"dvfs mode {mode!r} is not available in the live agent; use one of {MODES}")


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    cfg = ctx.settings.dvfs
    make_controller(cfg.mode, cfg.clock_mhz, cfg.period_s)  # fail fast on a bad mode
    latest: dict[str, WorkerStats] = {}
    controllers: dict[str, ClockController] = {}
    collector = LatencyCollector(ctx.settings.clock.speedup)
    overrides = ClockOverrides()  # the scheduler's emergency max clock, bounded in time
    caps: dict[str, float] = {}

    def on_plan(plan: Plan) -> None:
        caps.clear()
        caps.update(pool_clock_caps(plan))

    async def on_stats(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            stats = decode(msg.data, WorkerStats)
            if stats.node_id == cfg.node_id:
                latest[stats.worker_id] = stats

    async def on_done(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            done = decode_any(msg.data)
            if isinstance(done, Completion) and done.worker_id in latest:
                collector.add(done)

    subs = [
        await ctx.nc.subscribe(ctx.subjects.worker_stats_wildcard, cb=on_stats),
        await ctx.nc.subscribe(ctx.subjects.request_done, cb=on_done),
        await subscribe_overrides(
            ctx, overrides, latest, lambda w, mhz: _set_clock(ctx, w, mhz, "emergency")
        ),
        await watch_plan(ctx, on_plan),
    ]

    async def control() -> None:
        now = ctx.clock.now()
        for worker_id, stats in list(latest.items()):
            controller = controllers.get(worker_id)
            if controller is None:
                controller = controllers[worker_id] = make_controller(
                    cfg.mode, cfg.clock_mhz, cfg.period_s
                )
            target = controller.decide(observation_for(stats, collector.take(worker_id), now))
            target = min(target, caps.get(stats.pool_id, target))
            target = overrides.target(stats.pool_id, worker_id, target, max_clock_of(stats), now)
            if abs(stats.clock_mhz - target) >= CLOCK_TOLERANCE_MHZ:
                await _set_clock(ctx, worker_id, target, cfg.mode)
        report = DvfsReport(
            node_id=cfg.node_id,
            at=time.time(),
            mode=cfg.mode,
            gpus=[
                GpuReport(
                    worker_id=s.worker_id,
                    clock_mhz=s.clock_mhz,
                    power_w=s.power_w,
                    energy_j=s.energy_j,
                )
                for s in latest.values()
            ],
        )
        await ctx.nc.publish(ctx.subjects.dvfs_report(cfg.node_id), encode(report))

    try:
        await run_periodic(
            ctx.stop, ctx.clock.wall_period(cfg.period_s), control, service=NAME, name="control"
        )
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def _set_clock(ctx: ServiceContext, worker_id: str, mhz: float, reason: str) -> None:
    cmd = ClockCommand(
        worker_id=worker_id, clock_mhz=mhz, issued_by=ISSUER, reason=reason, issued_at=time.time()
    )
    with ctx.tracer.start_as_current_span(
        "set_clock", attributes={"worker.id": worker_id, "clock.mhz": mhz}
    ):
        try:
            reply = await request(
                ctx.nc,
                ctx.subjects.worker_clock(worker_id),
                cmd,
                ClockReply,
                ctx.settings.nats.request_timeout_s,
            )
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, DecodeError) as exc:
            logger.warning("clock command to %s failed: %s", worker_id, exc)
            return
    if not reply.accepted:
        logger.warning("worker %s refused clock: %s", worker_id, reply.reason)
