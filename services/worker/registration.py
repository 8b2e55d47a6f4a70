"""The worker's registration: its stats as heartbeat (NATS, Redis with a TTL, gauges).

Routers place by the :class:`~proto.messages.WorkerStats` a worker publishes every
``worker.stats_period_s`` and find it in Redis under a key that expires after
``worker.heartbeat_ttl_s``: a worker that falls silent drops out, and the router re-queues
what it held. :func:`worker_stats` is the pure part (what the stats say, including the
admission gate's advertised room); :func:`register` publishes them, refreshes the key and
the GPU series (:mod:`services.worker.gpu_meters`); :func:`deregister` removes the key when
the worker drains.
"""

from __future__ import annotations

import logging
import time

from redis.exceptions import RedisError

from proto.codec import encode
from proto.messages import WorkerStats
from services.worker.admission_gate import AdmissionGate
from services.worker.backend import BackendSnapshot
from services.worker.co2 import RegionCarbon
from services.worker.gpu_meters import GpuMeters
from shared.config import WorkerSettings
from shared.lifecycle import ServiceContext

__all__ = ["deregister", "register", "worker_stats"]

logger = logging.getLogger(__name__)


def worker_stats(
    cfg: WorkerSettings,
    snap: BackendSnapshot,
    gate: AdmissionGate,
    *,
    in_flight: int,
    started_at: float,
    tokens_out: int,
    backend: str,
    draining: bool,
) -> WorkerStats:
    """A worker's statistics now (also its heartbeat); ``draining`` covers parked too."""
    return WorkerStats(
        worker_id=cfg.worker_id,
        pool_id=cfg.pool_id,
        region=cfg.region,
        node_id=cfg.node_id,
        gpu=snap.gpu,
        model=snap.model,
        tp=snap.tp,
        running=snap.running,
        waiting=snap.waiting,
        max_num_seqs=gate.advertised_slots(cfg.max_num_seqs, in_flight),
        engine_max_num_seqs=cfg.max_num_seqs,
        started_at=started_at,
        free_slots=0 if gate.closed else max(0, cfg.max_num_seqs - in_flight),
        kv_blocks_used=snap.kv_blocks_used,
        kv_blocks_total=snap.kv_blocks_total,
        kv_block_size=max(1, snap.kv_block_size),
        clock_mhz=snap.clock_mhz,
        power_w=max(0.0, snap.power_w),
        energy_j=max(0.0, snap.energy_j),
        tokens_out=tokens_out,
        at=time.time(),
        backend=backend,
        draining=draining,
    )


async def register(
    ctx: ServiceContext,
    stats_subject: str,
    stats: WorkerStats,
    co2: RegionCarbon,
    meters: GpuMeters,
) -> None:
    """Export the GPU series, publish the stats and refresh the Redis registration.

    Raises:
        nats.errors.Error, RedisError, OSError: the caller's loop logs and retries.
    """
    payload = encode(stats)
    await ctx.nc.publish(stats_subject, payload)
    ttl_ms = int(ctx.settings.worker.heartbeat_ttl_s * 1000)
    await ctx.redis.set(ctx.keys.worker(stats.worker_id), payload, px=ttl_ms)
    meters.export(
        clock_mhz=stats.clock_mhz,
        power_w=stats.power_w,
        energy_j=stats.energy_j,
        co2_g=await co2.grams(stats.energy_j),
        model_s=ctx.clock.now(),
    )


async def deregister(ctx: ServiceContext, worker_id: str) -> None:
    """Remove the registration; one Redis cannot reach expires with its TTL."""
    try:
        await ctx.redis.delete(ctx.keys.worker(worker_id))
    except (RedisError, OSError) as exc:  # the registration expires with its TTL
        logger.warning("could not deregister: %s", exc)
