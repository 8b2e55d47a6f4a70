"""The worker's per-request state for predictive clock control (throttLL'eM §1, seed 002).

While ``dvfs.mode`` is ``predictive``, the worker publishes an
:class:`proto.messages.InstanceState` on ``state.worker.<id>`` every dvfs period (model
time, so ``period_s / speedup`` wall seconds): each request it holds with its prompt,
tokens generated so far, predicted output, cap and deadline, plus the engine's KV usage and
queue. The node's dvfs agent projects batch and KV from it (Eq. 1–2) and picks the lowest
clock meeting every deadline (Eq. 3–4). Other modes never read it, so the worker stays quiet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from proto.codec import encode
from proto.messages import InstanceState, RequestProgress
from services.worker.backend import BackendSnapshot
from services.worker.streams import RequestStream
from shared.config import WorkerSettings
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic

__all__ = ["PREDICTIVE_MODE", "build_state", "publish_states"]

PREDICTIVE_MODE = "predictive"
"""The dvfs mode that needs the state; the worker publishes it only then."""


def build_state(
    cfg: WorkerSettings,
    streams: Iterable[RequestStream],
    snap: BackendSnapshot,
    now_s: float,
    at: float,
) -> InstanceState:
    """One instance state: the worker's requests and the engine's KV and queue."""
    requests = [
        RequestProgress(
            request_id=s.request.request.request_id,
            prompt_tokens=s.request.input_tokens,
            generated_tokens=s.produced,
            predicted_output_tokens=s.request.predicted_output_tokens,
            max_tokens=s.request.request.max_tokens,
            deadline_s=s.request.deadline_s,
            tbt_slo_s=s.request.tbt_slo_ms / 1000.0,
        )
        for s in streams
    ]
    return InstanceState(
        worker_id=cfg.worker_id,
        node_id=cfg.node_id,
        pool_id=cfg.pool_id,
        now_s=now_s,
        at=at,
        clock_mhz=snap.clock_mhz,
        running=snap.running,
        waiting=snap.waiting,
        kv_blocks_used=snap.kv_blocks_used,
        kv_blocks_total=snap.kv_blocks_total,
        kv_block_size=max(1, snap.kv_block_size),
        requests=requests,
    )


async def publish_states(
    ctx: ServiceContext,
    streams: Callable[[], Iterable[RequestStream]],
    snapshot: Callable[[], BackendSnapshot],
) -> None:
    """Publish the instance state every dvfs period until ``ctx.stop`` is set."""
    cfg = ctx.settings.worker
    subject = ctx.subjects.instance_state(cfg.node_id, cfg.worker_id)

    async def publish() -> None:
        state = build_state(cfg, streams(), snapshot(), ctx.clock.now(), time.time())
        await ctx.nc.publish(subject, encode(state))

    await run_periodic(
        ctx.stop,
        ctx.clock.wall_period(ctx.settings.dvfs.period_s),
        publish,
        service="worker",
        name="instance-state",
    )
