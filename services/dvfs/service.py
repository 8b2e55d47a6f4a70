"""DVFS agent shell: one per node; holds a clock per GPU instance and reports power.

``dvfs.mode = fixed`` keeps every instance of the node at ``dvfs.clock_mhz`` (its maximum
when unset) and re-applies it when a worker reports another clock; the MIAD, predictive
and profile-based cores plug in behind the same loop. Clock changes go to the worker as
ClockCommands (the worker's backend applies them to the simulator or, opt-in, NVML).
"""

from __future__ import annotations

import contextlib
import logging
import time

import nats.errors
from nats.aio.msg import Msg

from proto.codec import DecodeError, decode, encode
from proto.messages import ClockCommand, ClockReply, DvfsReport, GpuReport, WorkerStats
from shared.bus import request
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic

__all__ = ["ISSUER", "NAME", "serve"]

NAME = "dvfs"
ISSUER = "dvfs"
CLOCK_TOLERANCE_MHZ = 15.0
"""Clocks within one NVML step of the target count as applied."""

logger = logging.getLogger(__name__)


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    cfg = ctx.settings.dvfs
    if cfg.mode != "fixed":
        raise ValueError(f"dvfs mode {cfg.mode!r} is not available yet; use 'fixed'")
    latest: dict[str, WorkerStats] = {}

    async def on_stats(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            stats = decode(msg.data, WorkerStats)
            if stats.node_id == cfg.node_id:
                latest[stats.worker_id] = stats

    sub = await ctx.nc.subscribe(ctx.subjects.worker_stats_wildcard, cb=on_stats)

    async def control() -> None:
        if cfg.clock_mhz is not None:
            for stats in list(latest.values()):
                if abs(stats.clock_mhz - cfg.clock_mhz) > CLOCK_TOLERANCE_MHZ:
                    await _set_clock(ctx, stats.worker_id, cfg.clock_mhz)
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
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def _set_clock(ctx: ServiceContext, worker_id: str, mhz: float) -> None:
    cmd = ClockCommand(
        worker_id=worker_id, clock_mhz=mhz, issued_by=ISSUER, reason="fixed", issued_at=time.time()
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
    if reply.accepted:
        logger.info("worker %s clock set to %.0f MHz", worker_id, reply.applied_mhz)
    else:
        logger.warning("worker %s refused clock: %s", worker_id, reply.reason)
