"""Worker shim: one engine instance behind the dispatch subject.

The ``sim`` backend runs the calibrated engine model in-process, in model time sped up by
``clock.speedup``: an iteration of d model seconds takes d / K wall seconds. Tokens stream
to the client's reply subject; completions also go to ``request.done``. The worker
registers in Redis with a heartbeat TTL, and on shutdown stops accepting, lets running
requests finish within the shutdown timeout, hands the rest back to the scheduler, and
deregisters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import nats.errors
from nats.aio.msg import Msg
from opentelemetry import context as otel_context

from proto.codec import DecodeError, encode
from proto.messages import (
    ClassifiedRequest,
    ClockCommand,
    ClockReply,
    Completion,
    DispatchReply,
    RequeueRequest,
    SubmitReply,
    WorkerStats,
)
from services.worker.streams import StreamBook
from shared.bus import request
from shared.bus import serve as serve_subject
from shared.counters import GPU_CLOCK_MHZ, GPU_ENERGY_J, GPU_POWER_W, REQUEST_LATENCY_S
from shared.engine import Engine, EngineConfig, EngineRequest, create_engine
from shared.lifecycle import ServiceContext
from shared.replies import reply_error

__all__ = ["NAME", "WorkerShim", "serve"]

NAME = "worker"

logger = logging.getLogger(__name__)


class WorkerShim:
    """Drives one engine in model time and talks to the bus."""

    def __init__(self, ctx: ServiceContext, engine: Engine) -> None:
        self._ctx = ctx
        self._cfg = ctx.settings.worker
        self._engine = engine
        self._book = StreamBook(self._cfg.worker_id, self._cfg.stream_flush_ms / 1000.0)
        self._speedup = ctx.settings.clock.speedup
        self._wall0 = time.time()
        self._work = asyncio.Event()
        self._emptied = asyncio.Event()
        """Set whenever the last in-flight request ends (drain waits on it)."""
        self._draining = False
        self._tokens_out = 0
        self._last_energy = (0.0, 0.0)  # (engine time, energy) at the previous stats
        self._power_w = 0.0
        self._trace_parents: dict[str, otel_context.Context] = {}

    def _wall_of(self, engine_s: float) -> float:
        return self._wall0 + engine_s / self._speedup

    def _engine_now(self) -> float:
        return (time.time() - self._wall0) * self._speedup

    async def on_dispatch(self, req: ClassifiedRequest, _msg: Msg) -> DispatchReply:
        """Accept a request if there is room; duplicates are accepted idempotently."""
        rid = req.request.request_id
        now = time.time()
        reply = DispatchReply(
            request_id=rid, worker_id=self._cfg.worker_id, accepted=True, accepted_at=now
        )
        if rid in self._book:
            return reply
        if self._draining:
            return DispatchReply(
                request_id=rid,
                worker_id=self._cfg.worker_id,
                accepted=False,
                accepted_at=now,
                reason="draining",
            )
        if len(self._book) >= self._cfg.max_num_seqs:
            return DispatchReply(
                request_id=rid,
                worker_id=self._cfg.worker_id,
                accepted=False,
                accepted_at=now,
                reason="full",
            )
        if not self._engine.has_work:
            self._engine.idle_until(max(self._engine.now_s, self._engine_now()))
        try:
            self._engine.add(
                EngineRequest(
                    request_id=rid,
                    prompt_tokens=req.input_tokens,
                    output_tokens=req.request.max_tokens,
                    arrival_s=self._engine.now_s,
                )
            )
        except ValueError as exc:
            # Can never fit this GPU's KV cache: a final answer, not a retry elsewhere.
            await reply_error(
                self._ctx.nc,
                self._ctx.subjects,
                service=NAME,
                code="kv_capacity",
                reason=str(exc),
                request=req.request,
            )
            return reply
        self._book.open(req, now)
        # The generate span is recorded at completion, as a child of this dispatch span.
        self._trace_parents[rid] = otel_context.get_current()
        self._work.set()
        return reply

    async def on_clock(self, cmd: ClockCommand, _msg: Msg) -> ClockReply:
        """Apply a clock from an allowed issuer, snapped to a supported step."""
        if cmd.issued_by not in self._ctx.settings.dvfs.allowed_issuers:
            return ClockReply(
                worker_id=self._cfg.worker_id,
                applied_mhz=self._engine.clock_mhz,
                accepted=False,
                reason=f"issuer {cmd.issued_by!r} may not set clocks",
            )
        applied = self._engine.set_clock_mhz(cmd.clock_mhz)
        return ClockReply(worker_id=self._cfg.worker_id, applied_mhz=applied, accepted=True)

    async def run_engine(self) -> None:
        """Iterate the engine while it has work, pacing iterations to model time."""
        nc = self._ctx.nc
        # After stop, keep iterating until every accepted request has finished (drain).
        while not (self._ctx.stop.is_set() and not len(self._book)):
            if not self._engine.has_work:
                self._work.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._work.wait(), 0.05)
                if not self._engine.has_work:
                    self._engine.idle_until(max(self._engine.now_s, self._engine_now()))
                    for subject, chunk in self._book.flush_due(time.time()):
                        await nc.publish(subject, encode(chunk))
                continue
            result = self._engine.step()
            if result is None:
                continue
            delay = self._wall_of(self._engine.now_s) - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # never starve the bus handlers
            at = time.time()
            self._tokens_out += len(result.emitted)
            chunks, completions = self._book.on_iteration(
                result.emitted, result.finished, result.preempted, result.energy_j, at
            )
            for subject, chunk in chunks:
                await nc.publish(subject, encode(chunk))
            for subject, done in completions:
                self._record_completion(done)
                payload = encode(done)
                await nc.publish(subject, payload)
                await nc.publish(self._ctx.subjects.request_done, payload)
            if not len(self._book):
                self._emptied.set()

    def _record_completion(self, done: Completion) -> None:
        REQUEST_LATENCY_S.labels("ttft", done.request_class).observe(
            done.first_token_at - done.sent_at
        )
        REQUEST_LATENCY_S.labels("e2e", done.request_class).observe(done.finished_at - done.sent_at)
        parent = self._trace_parents.pop(done.request_id, None)
        span = self._ctx.tracer.start_span(
            "generate",
            context=parent,
            start_time=int(done.accepted_at * 1e9),
            attributes={
                "request.id": done.request_id,
                "gen_ai.usage.input_tokens": done.input_tokens,
                "gen_ai.usage.output_tokens": done.output_tokens,
                "greenserve.energy_j": done.energy_j,
            },
        )
        span.end(end_time=int(done.finished_at * 1e9))

    def stats(self) -> WorkerStats:
        """Current statistics (also the heartbeat)."""
        eng = self._engine
        t_prev, e_prev = self._last_energy
        if eng.now_s > t_prev:
            self._power_w = (eng.energy_j - e_prev) / (eng.now_s - t_prev)
            self._last_energy = (eng.now_s, eng.energy_j)
        cfg = self._cfg
        return WorkerStats(
            worker_id=cfg.worker_id,
            pool_id=cfg.pool_id,
            region=cfg.region,
            node_id=cfg.node_id,
            gpu=eng.config.gpu,
            model=eng.config.model,
            tp=eng.config.tp,
            running=eng.num_running,
            waiting=eng.num_waiting,
            max_num_seqs=cfg.max_num_seqs,
            free_slots=max(0, cfg.max_num_seqs - len(self._book)),
            kv_blocks_used=eng.kv_blocks_used,
            kv_blocks_total=eng.kv_blocks_total,
            kv_block_size=eng.config.block_size,
            clock_mhz=eng.clock_mhz,
            power_w=max(0.0, self._power_w),
            energy_j=eng.energy_j,
            tokens_out=self._tokens_out,
            at=time.time(),
            backend=cfg.backend,
            draining=self._draining,
        )

    async def publish_stats(self) -> None:
        """Publish stats and refresh the Redis registration."""
        stats = self.stats()
        GPU_CLOCK_MHZ.labels(stats.worker_id).set(stats.clock_mhz)
        GPU_POWER_W.labels(stats.worker_id).set(stats.power_w)
        GPU_ENERGY_J.labels(stats.worker_id).set(stats.energy_j)
        payload = encode(stats)
        await self._ctx.nc.publish(self._ctx.subjects.worker_stats(self._cfg.worker_id), payload)
        ttl_ms = int(self._cfg.heartbeat_ttl_s * 1000)
        await self._ctx.redis.set(self._ctx.keys.worker(self._cfg.worker_id), payload, px=ttl_ms)

    async def heartbeat(self) -> None:
        """Stats loop."""
        while not self._ctx.stop.is_set():
            await self.publish_stats()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ctx.stop.wait(), self._cfg.stats_period_s)

    async def drain(self, timeout_s: float) -> None:
        """Stop accepting, let running requests finish, hand the rest back."""
        self._draining = True
        await self.publish_stats()
        if len(self._book):
            self._emptied.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._emptied.wait(), timeout_s)
        leftovers = self._book.requests()
        for req in leftovers:
            self._engine.abort(req.request.request_id)
            self._book.drop(req.request.request_id)
            self._trace_parents.pop(req.request.request_id, None)
        if leftovers:
            logger.warning("handing %d unfinished requests back to the scheduler", len(leftovers))
            with contextlib.suppress(
                nats.errors.TimeoutError, nats.errors.NoRespondersError, DecodeError
            ):
                await request(
                    self._ctx.nc,
                    self._ctx.subjects.scheduler_requeue,
                    RequeueRequest(requests=leftovers),
                    SubmitReply,
                    self._ctx.settings.nats.request_timeout_s,
                )
        await self._ctx.redis.delete(self._ctx.keys.worker(self._cfg.worker_id))


def build_engine(ctx: ServiceContext) -> Engine:
    """The engine backend named by the settings."""
    cfg = ctx.settings.worker
    if cfg.backend != "sim":
        raise ValueError(
            f"worker backend {cfg.backend!r} is not available in this build; use 'sim'"
        )
    return create_engine(
        EngineConfig(gpu=cfg.gpu, model=cfg.model, tp=cfg.tp, max_num_seqs=cfg.max_num_seqs)
    )


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set, then drain."""
    shim = WorkerShim(ctx, build_engine(ctx))
    wid = ctx.settings.worker.worker_id
    subs = [
        await serve_subject(
            ctx.nc,
            ctx.subjects.worker_dispatch(wid),
            ClassifiedRequest,
            shim.on_dispatch,
            service=NAME,
        ),
        await serve_subject(
            ctx.nc, ctx.subjects.worker_clock(wid), ClockCommand, shim.on_clock, service=NAME
        ),
    ]
    async with asyncio.TaskGroup() as tg:
        engine_task = tg.create_task(shim.run_engine())
        tg.create_task(shim.heartbeat())
        await ctx.stop.wait()
        await shim.drain(ctx.settings.shutdown_timeout_s)
        engine_task.cancel()
    for sub in subs:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
