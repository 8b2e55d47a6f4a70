"""The live agent's MIAD against the class SLOs (:mod:`services.dvfs.slo_miad`).

One :class:`~services.dvfs.miad.MiadController` per worker, built for the worker's engine
(its SLO floor depends on GPU, model and TP, computed on the engine model like the
predictive mode's fits), and the floor of the long prompts a pool is sent: the observed p99
prompt of the open-ended input bucket among the requests this node served (the simulator's
planner keeps the same sample over all requests), the maximum clock until the node has
served enough requests to trust its sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proto.messages import Completion, Plan, WorkerStats
from services.dvfs.miad import MiadController
from services.dvfs.profile_live import EngineKey, engine_config, engine_key
from services.dvfs.slo_miad import (
    capped_clock,
    miad_floor_mhz,
    served_floor_mhz,
    serves_open_input,
    slo_miad_config,
)
from shared.config import DvfsSettings, PlannerSettings
from shared.domain.classes import ClassScheme, ClassSLO
from shared.domain.observed_mix import ObservedMix, ObservedMixSettings

__all__ = ["LiveSloMiad"]


class LiveSloMiad:
    """MIAD controllers and clock floors of one node's workers."""

    def __init__(
        self,
        dvfs: DvfsSettings,
        planner: PlannerSettings,
        scheme: ClassScheme,
        slos: Mapping[str, ClassSLO],
    ) -> None:
        """Controllers with ``dvfs``'s guard, floor and period; the served sample sized as
        the planner's (``planner.observed_*``)."""
        self._dvfs = dvfs
        self._scheme = scheme
        self._slos = dict(slos)
        self._controllers: dict[str, tuple[EngineKey, MiadController]] = {}
        self._served = ObservedMix(
            scheme,
            ObservedMixSettings(
                sample=planner.observed_sample, min_requests=planner.observed_min_requests
            ),
        )
        self._open_p99: int | None = None
        self._open_p99_stale = False
        self._classes: dict[str, Sequence[str]] = {}

    def on_plan(self, plan: Plan) -> None:
        """Follow each pool's classes (whether it is sent the long prompts)."""
        self._classes = {pool.pool_id: tuple(pool.classes) for pool in plan.pools}

    def on_done(self, done: Completion) -> None:
        """One request served on this node (its lengths feed the served floor)."""
        self._served.add(done.input_tokens, done.output_tokens)
        self._open_p99_stale = True

    def forget(self, worker_id: str) -> None:
        """A worker gone: drop its controller."""
        self._controllers.pop(worker_id, None)

    def controller(self, stats: WorkerStats) -> MiadController:
        """The worker's controller, built again when it comes back on another engine."""
        key = engine_key(stats)
        held = self._controllers.get(stats.worker_id)
        if held is None or held[0] != key:
            config = slo_miad_config(
                self._slos,
                guard=self._dvfs.miad_guard,
                floor_mhz=self._floor(key),
                period_s=self._dvfs.period_s,
                max_clock_mhz=self._dvfs.clock_mhz,
            )
            held = self._controllers[stats.worker_id] = (key, MiadController(config))
        return held[1]

    def target(self, stats: WorkerStats, decided_mhz: float, cap_mhz: float | None) -> float:
        """MIAD's choice under the plan's cap for the worker's pool (``cap_mhz``) and the
        floors (:func:`capped_clock`)."""
        key = engine_key(stats)
        served_floor = 0.0
        if self._open_p99_stale:  # sorted once per new completion, not per worker and period
            self._open_p99 = self._served.open_bucket_p99()
            self._open_p99_stale = False
        if self._dvfs.miad_slo_floor:
            served_floor = served_floor_mhz(
                engine_config(key),
                self._scheme,
                self._slos,
                self._dvfs.miad_guard,
                serves_open=serves_open_input(self._classes.get(stats.pool_id, ()), self._scheme),
                sample_trusted=self._served.trusted,
                open_prompt=self._open_p99,
                max_clock_mhz=self._dvfs.clock_mhz,
            )
        return capped_clock(
            decided_mhz,
            cap_mhz=cap_mhz,
            floor_mhz=self._floor(key),
            served_floor_mhz=served_floor,
        )

    def _floor(self, key: EngineKey) -> float:
        guard, slo_floor = self._dvfs.miad_guard, self._dvfs.miad_slo_floor
        return miad_floor_mhz(
            engine_config(key), self._scheme, self._slos, guard, slo_floor=slo_floor
        )
