"""DVFS agent shell: one per node; a clock controller per GPU instance, and power reports.

Modes: ``fixed`` (every instance at ``dvfs.clock_mhz``, or its maximum), ``miad`` (the
default: FREESH Eq. 5, ×2 on congestion, −100 MHz otherwise, every ``period_s`` of model
time, congestion judged against ``miad_guard`` × the class SLOs and the clock floored at
the SLO floor, :mod:`services.dvfs.miad_live`, the simulator's headline clock control),
``predictive`` (throttLL'eM §3.3 with GreenServe's arrival, prefill and model-margin
extensions: the lowest clock at which every request's projected finish meets
its deadline) and ``profile`` (DynamoLLM's instance manager: the least-power clock whose
profiled TTFT and TBT meet the SLO at the worker's load, the maximum clock after a request
came near its class's bound; the profile is swept on the engine simulator with the lengths
the node's workers served, and again when that mix drifts, :mod:`services.dvfs.profile_live`).
MIAD judges congestion from the latencies of requests that finished on the instance during
the period. Predictive control reads each worker's :class:`proto.messages.InstanceState`
(published by the workers only in this mode) and an IPS model profiled and fitted once per
(GPU, model, TP, batch limit) on the engine simulator, in a thread, at the first sight of
such a worker (about 1–2 s); it is the same :class:`services.dvfs.predictive.PredictiveController`
the ``dvfs`` bench measures.

Clock changes go to the worker as ClockCommands on the node-bound subject
``clock.v2.<node>.<worker>`` (the NATS ACL lets an agent publish only to its own node);
the worker's backend applies them to the simulator (or, opt-in, through NVML). A
ClockOverride from the scheduler's emergency ladder holds a pool at its
maximum clock for a bounded time (:mod:`services.dvfs.clock_override`). Under a MILP plan
the pool's planned clock caps every controller's choice
(:func:`shared.domain.plan.pool_clock_caps`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import nats.errors
from nats.aio.msg import Msg

from proto.codec import DecodeError, decode, encode, request_endings
from proto.messages import (
    ClockCommand,
    ClockReply,
    Completion,
    DvfsReport,
    GpuReport,
    InstanceState,
    Plan,
    WorkerStats,
)
from services.dvfs.background_builds import BackgroundBuilds
from services.dvfs.clock_override import ClockOverrides, max_clock_of, subscribe_overrides
from services.dvfs.controller import ClockController, FixedClockController
from services.dvfs.miad_live import LiveSloMiad
from services.dvfs.observations import LatencyCollector, observation_for, with_requests
from services.dvfs.perf_model import PredictiveModels, fit_predictive_models
from services.dvfs.predictive import (
    DEFAULT_ARRIVAL_WINDOW_S,
    PredictiveConfig,
    PredictiveController,
)
from services.dvfs.profile_live import (
    EngineKey,
    LoadMeter,
    ProfileBook,
    ProfileControllers,
    engine_config,
    engine_key,
)
from shared.bus import request
from shared.counters import PROFILE_SWEEPS
from shared.domain.classes import default_slos, scheme_by_name
from shared.domain.plan import pool_clock_caps
from shared.engine import create_engine
from shared.lifecycle import ServiceContext
from shared.loops import run_periodic
from shared.plan_watch import watch_plan

__all__ = ["ISSUER", "MODES", "NAME", "ModelBook", "make_controller", "serve", "simulator_models"]

NAME = "dvfs"
ISSUER = "dvfs"
MODES = ("fixed", "miad", "predictive", "profile")
CLOCK_TOLERANCE_MHZ = 15.0
"""Clocks within one NVML step of the target count as applied."""
STALE_STATE_PERIODS = 3.0
"""An instance state older than this many periods is not acted on (worker gone or slow)."""

logger = logging.getLogger(__name__)

_last_refusal: dict[str, str] = {}
"""Each worker's last clock refusal, logged when it first comes (bounded by the workers)."""


def make_controller(
    mode: str,
    clock_mhz: float | None,
    period_s: float,
    models: PredictiveModels | None = None,
) -> ClockController:
    """The controller of one instance for a dvfs mode.

    Args:
        mode: ``fixed`` or ``predictive`` (``miad`` and ``profile`` are built per worker).
        clock_mhz: the fixed clock, or MIAD's ceiling.
        period_s: model-time control period.
        models: the instance's IPS and prefill models (``predictive`` only).

    Raises:
        ValueError: for a mode the live agent does not run, or predictive without models.
    """
    if mode == "fixed":
        return FixedClockController(clock_mhz, period_s)
    if mode == "miad":
        raise ValueError("miad control is built per worker for its engine (LiveSloMiad)")
    if mode == "profile":
        raise ValueError("profile control is built per worker from its profile")
    if mode == "predictive":
        if models is None:
            raise ValueError("predictive control needs the instance's fitted models")
        config = PredictiveConfig(
            period_s=period_s,
            arrival_window_s=DEFAULT_ARRIVAL_WINDOW_S,
            time_margin=models.margin,
        )
        return PredictiveController(models.ips, config, prefill=models.prefill)
    raise ValueError(f"dvfs mode {mode!r} is not available in the live agent; use one of {MODES}")


class ModelBook:
    """Predictive models per engine, fitted in a worker thread on first demand."""

    def __init__(self, fit: Callable[[EngineKey], PredictiveModels] | None = None) -> None:
        """Fit with ``fit`` (default: profile the engine simulator of that key)."""
        self._fit = fit or simulator_models
        self._models: BackgroundBuilds[EngineKey, PredictiveModels] = BackgroundBuilds(
            "the IPS model"
        )

    def get(self, key: EngineKey) -> PredictiveModels | None:
        """The models of ``key`` if fitted; otherwise start fitting them and return None."""
        return self._models.get(key, functools.partial(self._fit, key))

    def close(self) -> None:
        """Cancel fits still running."""
        self._models.close()


@functools.cache
def simulator_models(key: EngineKey) -> PredictiveModels:
    """Profile and fit on the engine simulator of (GPU, model, TP, batch limit), once per process.

    The batch limit is the worker's own (``WorkerStats.engine_limit``): a fit on the engine
    simulator's 256-sequence default would spend most of its rows on batches the worker never
    runs. A real engine would be profiled the same way through the ``Engine`` API; the live
    agent uses the simulator's model for every backend (see ``docs/dvfs.md``).
    """
    config = engine_config(key)
    return fit_predictive_models(lambda: create_engine(config))


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    cfg = ctx.settings.dvfs
    predictive = cfg.mode == "predictive"
    profiled = cfg.mode == "profile"
    if cfg.mode == "fixed" or cfg.mode not in MODES:
        make_controller(cfg.mode, cfg.clock_mhz, cfg.period_s)  # fail fast on a bad mode
    profiles = ProfileBook(
        cfg.profile_min_requests,
        drift_window=cfg.profile_drift_window,
        on_sweep=lambda key, reason: PROFILE_SWEEPS.labels(reason).inc(),
    )
    loads = LoadMeter(cfg.profile_window_s)
    scheme = scheme_by_name(ctx.settings.classifier.scheme)
    slos = default_slos(scheme)
    latest: dict[str, WorkerStats] = {}
    heard: dict[str, float] = {}
    """Monotonic time of each worker's last heartbeat: one silent past its registration's
    TTL is gone (or hung) and is forgotten, not reported and commanded every period."""
    states: dict[str, InstanceState] = {}
    models = ModelBook()
    controllers: dict[str, ClockController] = {}
    fitted_for: dict[str, EngineKey] = {}
    """The engine (GPU, model, TP, batch limit) each predictive controller was fitted for."""
    profile_controllers = ProfileControllers(profiles, slos, period_s=cfg.period_s)
    collector = LatencyCollector(ctx.settings.clock.speedup)
    overrides = ClockOverrides()  # the scheduler's emergency max clock, bounded in time
    caps: dict[str, float] = {}
    slo_miad = LiveSloMiad(cfg, ctx.settings.planner, scheme, slos) if cfg.mode == "miad" else None

    def on_plan(plan: Plan) -> None:
        caps.clear()
        caps.update(pool_clock_caps(plan))
        if slo_miad is not None:
            slo_miad.on_plan(plan)

    async def on_stats(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            stats = decode(msg.data, WorkerStats)
            if stats.node_id == cfg.node_id:
                latest[stats.worker_id] = stats
                heard[stats.worker_id] = time.monotonic()

    async def on_done(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            for done in request_endings(msg.data):
                if not isinstance(done, Completion) or done.worker_id not in latest:
                    continue
                collector.add(done)
                if slo_miad is not None:
                    slo_miad.on_done(done)
                if profiled:
                    key = engine_key(latest[done.worker_id])
                    profiles.add(key, done.request_class, done.input_tokens, done.output_tokens)
                    loads.add(done.worker_id, ctx.clock.now())

    async def on_state(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            state = decode(msg.data, InstanceState)
            if state.node_id == cfg.node_id:
                states[state.worker_id] = state

    subs = [
        await ctx.nc.subscribe(ctx.subjects.worker_stats_node_wildcard(cfg.node_id), cb=on_stats),
        await ctx.nc.subscribe(ctx.subjects.request_done_node_wildcard(cfg.node_id), cb=on_done),
        await subscribe_overrides(
            ctx, overrides, latest, lambda w, mhz: _set_clock(ctx, w, mhz, "emergency")
        ),
        await watch_plan(ctx, on_plan),
    ]
    if predictive:
        subs.append(
            await ctx.nc.subscribe(
                ctx.subjects.instance_state_node_wildcard(cfg.node_id), cb=on_state
            )
        )
    stale_wall_s = STALE_STATE_PERIODS * ctx.clock.wall_period(cfg.period_s)

    def forget_departed() -> None:
        cutoff = time.monotonic() - ctx.settings.worker.heartbeat_ttl_s
        for worker_id in [w for w, at in heard.items() if at < cutoff]:
            del heard[worker_id]
            latest.pop(worker_id, None)
            states.pop(worker_id, None)
            controllers.pop(worker_id, None)
            if slo_miad is not None:
                slo_miad.forget(worker_id)
            fitted_for.pop(worker_id, None)
            collector.take(worker_id)
            logger.info("worker %s sent no heartbeat for its TTL; no longer controlled", worker_id)

    async def control() -> None:
        forget_departed()
        now = ctx.clock.now()
        commands: list[tuple[str, float]] = []
        for worker_id, stats in list(latest.items()):
            observation = observation_for(stats, collector.take(worker_id), now)
            controller = controllers.get(worker_id)
            if predictive:
                state = states.get(worker_id)
                if state is None or time.time() - state.at > stale_wall_s:
                    continue  # nothing recent to project: leave the clock where it is
                observation = with_requests(observation, state)
                key = engine_key(stats)
                # A worker id that comes back serving another model (or engine) needs that
                # model's fit: the key, model included, picks the models.
                if controller is None or fitted_for.get(worker_id) != key:
                    fitted = models.get(key)
                    if fitted is None:
                        continue  # the model is being fitted
                    controller = controllers[worker_id] = make_controller(
                        cfg.mode, cfg.clock_mhz, cfg.period_s, fitted
                    )
                    fitted_for[worker_id] = key
            elif profiled:
                observation = replace(observation, arrival_rate_rps=loads.rate(worker_id, now))
                policy = profile_controllers.get(worker_id, engine_key(stats))
                if policy is None:
                    continue  # too few lengths seen yet, or the profile is being swept
                controller = controllers[worker_id] = policy
            elif slo_miad is not None:
                controller = slo_miad.controller(stats)
            elif controller is None:
                controller = controllers[worker_id] = make_controller(
                    cfg.mode, cfg.clock_mhz, cfg.period_s
                )
            target = controller.decide(observation)
            if slo_miad is not None:  # the plan's cap, never below the SLO floors
                target = slo_miad.target(stats, target, caps.get(stats.pool_id))
            else:
                target = min(target, caps.get(stats.pool_id, target))
            target = overrides.target(stats.pool_id, worker_id, target, max_clock_of(stats), now)
            if abs(stats.clock_mhz - target) >= CLOCK_TOLERANCE_MHZ:
                commands.append((worker_id, target))
        await _set_clocks(ctx, commands, cfg.mode)
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
        models.close()
        profiles.close()
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def _set_clocks(ctx: ServiceContext, commands: list[tuple[str, float]], reason: str) -> None:
    """Send each (worker, clock) command at once, and wait for all the replies.

    One after another, a worker alive by its heartbeat but not answering made every worker
    after it wait out the request timeout, each control period. Each command still handles
    its own refusal and timeout (:func:`_set_clock` logs them); any other failure is logged
    per worker and the first one raised once all have ended, so the control loop counts
    and backs off as before, and no command is left running unawaited.
    """
    results = await asyncio.gather(
        *(_set_clock(ctx, worker_id, mhz, reason) for worker_id, mhz in commands),
        return_exceptions=True,
    )
    failures = [
        (worker_id, result)
        for (worker_id, _mhz), result in zip(commands, results, strict=True)
        # Exception, not BaseException: only the whole control step is ever cancelled (gather
        # then raises), and re-raising a stray CancelledError would end the control loop.
        if isinstance(result, Exception)
    ]
    for worker_id, exc in failures[1:]:
        logger.warning("clock command to %s failed: %r", worker_id, exc)
    if failures:
        raise failures[0][1]


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
                ctx.subjects.worker_clock_v2(ctx.settings.dvfs.node_id, worker_id),
                cmd,
                ClockReply,
                ctx.settings.nats.request_timeout_s,
            )
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, DecodeError) as exc:
            logger.warning("clock command to %s failed: %s", worker_id, exc)
            return
    if reply.accepted:
        _last_refusal.pop(worker_id, None)
    elif _last_refusal.get(worker_id) != reply.reason:
        # Once per cause, not each period: a GPU without clock privilege refuses for good.
        _last_refusal[worker_id] = reply.reason
        logger.warning("worker %s refused clock: %s", worker_id, reply.reason)
