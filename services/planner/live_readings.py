"""What the live planner reads: completions and ready events from the bus, the fleet and the
carbon forecasts from Redis.

:class:`LiveReadings` is a base of :class:`services.planner.live_service.LivePlanner`, which
builds the state declared here in its ``__init__``; the methods turn each reading into that
state (demand per model, served sizes, SLO misses, pools with queued work).
"""

from __future__ import annotations

import contextlib
import time

from nats.aio.msg import Msg

from proto.codec import DecodeError, decode, request_endings
from proto.messages import Completion, Forecast, WorkerStats
from services.planner.live_inputs import DemandTracker, LivePool, intensity_steps, pools_from_stats
from services.planner.problem import Objective
from services.planner.slo_feedback import MissWindow, missed_slo
from shared.config import PlannerSettings as LivePlannerSettings
from shared.domain.classes import ClassScheme, ClassSLO
from shared.domain.load_forecast import LoadForecastConfig
from shared.domain.observed_mix import ObservedMix
from shared.lifecycle import ServiceContext
from shared.store import as_bytes

__all__ = ["LiveReadings"]


class LiveReadings:
    """The live planner's readings of the bus and of Redis (a base of ``LivePlanner``)."""

    _ctx: ServiceContext
    _cfg: LivePlannerSettings
    _schemes: dict[str, ClassScheme]
    _load_config: LoadForecastConfig
    _slos: dict[str, ClassSLO]
    _observed: ObservedMix | None
    _misses: MissWindow | None
    _demands: dict[str, DemandTracker]
    _max_num_seqs: dict[str, int]
    _last_intensity: dict[str, float]
    _ready_wall: dict[str, float]

    def _demand(self, model: str) -> DemandTracker:
        tracker = self._demands.get(model)
        if tracker is None:
            tracker = self._demands[model] = DemandTracker(
                self._schemes,
                self._load_config,
                self._cfg.demand_history_steps,
                coincident=self._cfg.coincident_demand,
            )
        return tracker

    async def on_done(self, msg: Msg) -> None:
        """Count a completed request as an arrival of its model at its send time (model
        time)."""
        with contextlib.suppress(DecodeError):
            for done in request_endings(msg.data):
                if isinstance(done, Completion):
                    arrival = self._ctx.clock.model_at(done.sent_at)
                    latency = self._ctx.clock.model_at(done.finished_at) - arrival
                    self._demand(done.model).add(
                        arrival, done.input_tokens, max(1, done.output_tokens), latency
                    )
                    if self._observed is not None:
                        self._observed.add(done.input_tokens, done.output_tokens)
                    if self._misses is not None:
                        self._misses.add(
                            done.pool_id,
                            finish_s=arrival + latency,
                            arrival_s=arrival,
                            request_class=done.request_class,
                            missed=self._missed(done),
                        )

    def _missed(self, done: Completion) -> bool:
        """Whether a completion missed its class SLO, judged as the simulator judges it."""
        clock = self._ctx.clock
        return missed_slo(
            arrival_s=clock.model_at(done.sent_at),
            first_s=clock.model_at(done.first_token_at),
            last_s=clock.model_at(done.finished_at),
            tokens=done.output_tokens,
            lat_s=done.lat_s,
            slo=self._slos.get(done.request_class),
        )

    async def on_ready(self, msg: Msg) -> None:
        """Note that the scheduler holds queued work for a pool."""
        self._ready_wall[msg.subject.rsplit(".", 1)[-1]] = time.time()

    async def _inventory(self) -> dict[str, LivePool]:
        redis, keys = self._ctx.redis, self._ctx.keys
        names = [k async for k in redis.scan_iter(match=keys.worker_pattern)]
        stats: list[WorkerStats] = []
        for raw in await redis.mget(names) if names else []:
            if raw:
                with contextlib.suppress(DecodeError):
                    stats.append(decode(as_bytes(raw), WorkerStats))
        self._max_num_seqs = {s.pool_id: s.engine_limit for s in stats}
        return pools_from_stats(stats)

    async def _intensity(self, regions: list[str], start_s: float) -> dict[str, tuple[float, ...]]:
        cfg = self._cfg
        steps, step_s = cfg.steps_per_epoch, cfg.epoch_s / cfg.steps_per_epoch
        if cfg.objective == Objective.ENERGY and cfg.primary_slack == 0:
            # FREESH's MinEnergy sees λ = 1; with a slack its tie-break is least carbon.
            return dict.fromkeys(regions, (1.0,) * steps)
        out: dict[str, tuple[float, ...] | None] = {}
        for region in regions:
            forecast: Forecast | None = None
            raw = await self._ctx.redis.get(self._ctx.keys.forecast(region))
            if raw:
                with contextlib.suppress(DecodeError):
                    forecast = decode(as_bytes(raw), Forecast)
            values = intensity_steps(
                forecast, start_s, step_s, steps, self._last_intensity.get(region)
            )
            if values:
                self._last_intensity[region] = values[-1]
            out[region] = values
        known = [max(v) for v in out.values() if v]
        # A region with no forecast yet is taken as the worst known one: never a magnet.
        worst = max(known) if known else 1.0
        return {r: v if v else (worst,) * steps for r, v in out.items()}
