"""Control loops of the simulated cluster: clock (dvfs), instance scaling, and sampling.

Each loop is a tick at its own period (scenario ``control``): the dvfs tick asks each
instance's clock controller (FREESH MIAD, Eq. 5a/5b, from ``services.dvfs``) for a clock and
charges ``clock_change_s`` of stall on a change; the scale tick resizes the fleet (reactive
policies, :mod:`loadgen.simulator.reactive_scaling`); the sample tick reads every engine's energy
counter, adds the bare idle power of the unused GPUs of every powered node
(:mod:`loadgen.simulator.nodes`), prices it with the region's hourly intensity, and records
the report's time series. Energy, GPU- and node-time before ``measure_from_s`` (a warm-up)
are left out of the totals, not out of the series.

What the loops read of the cluster and what they do to it are
:class:`~loadgen.simulator.cluster_view.ControlView` and
:class:`~loadgen.simulator.cluster_view.ClusterActions`, given at construction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.simulator.cluster_view import (
    ClusterActions,
    ControlView,
    FleetActions,
    FleetPlanner,
)
from loadgen.simulator.instance import RequestState, SimInstance
from loadgen.simulator.nodes import NodeFullError
from loadgen.simulator.policies import miad_available
from loadgen.simulator.reactive_scaling import ReactiveScaler
from services.dvfs.slo_miad import (
    capped_clock,
    miad_floor_mhz,
    served_floor_mhz,
    slo_miad_config,
)
from shared.metrics.energy import JOULES_PER_KWH
from shared.metrics.latency import SLO_WINDOW_FACTOR

__all__ = ["ControlLoops", "Series"]


@dataclass(slots=True)
class Series:
    """The report's time series, one entry per sample tick."""

    t_s: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    clock_mhz: list[float] = field(default_factory=list)
    active_gpus: list[int] = field(default_factory=list)
    powered_nodes: list[int] = field(default_factory=list)
    co2_g_per_s: list[float] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    outstanding: list[int] = field(default_factory=list)
    power_w_by_region: dict[str, list[float]] = field(default_factory=dict)


class ControlLoops:
    """The ticks of one simulation, and the energy/CO2 accounting they drive."""

    def __init__(
        self,
        view: ControlView,
        actions: ClusterActions,
        fleet_planner: Callable[[FleetActions], FleetPlanner | None],
    ) -> None:
        """Bind to a simulator's view and actions; :meth:`start` brings the initial fleet up.

        Args:
            view: what the loops read of the cluster.
            actions: what they do to it.
            fleet_planner: builds the policy's fleet planner (the epoch planner, ScaleShard's
                pool manager, or None) from the actions the loops give it.
        """
        self.view = view
        self.actions = actions
        control = view.scenario.control
        self.use_miad = view.policy.clock == "miad" and miad_available()
        self.use_profile = view.policy.clock == "profile"
        self.clock_note = (
            "miad"
            if self.use_miad
            else "profile"
            if self.use_profile
            else (
                "max (services.dvfs MIAD not available)" if view.policy.clock == "miad" else "max"
            )
        )
        # DynamoLLM's instance manager decides every 5 s, MIAD every dvfs period.
        self.clock_period_s = control.dvfs_period_s
        if self.use_profile:
            from services.dvfs.profile_policy import DYNAMOLLM_PERIOD_S

            self.clock_period_s = DYNAMOLLM_PERIOD_S
        self.wake_bound_s = min(
            control.sample_period_s,
            self.clock_period_s if self.use_miad or self.use_profile else float("inf"),
        )
        self._profiles: dict[Any, Any] = {}
        """Profile table per engine configuration, swept once with the trace's lengths."""
        self.series = Series()
        self.energy_j = 0.0
        self.co2_g = 0.0
        self.gpu_seconds = 0.0
        self.node_seconds = 0.0
        """Powered node-time (booting included) in the measured window."""
        self.bare_energy_j = 0.0
        """Part of ``energy_j`` drawn by GPUs that hold no model on powered nodes."""
        self.max_instances = 0
        self.max_gpus = 0
        self.energy_by_region: dict[str, float] = defaultdict(float)
        self.co2_by_region: dict[str, float] = defaultdict(float)
        self._seen_j: dict[int, float] = {}
        self._last_sample_s = 0.0
        self.scale_events = 0
        self.scaler = ReactiveScaler(view, actions, self.new_instance, self._count_scale_event)
        self.clock_changes = 0
        self.end_s = 0.0
        self.planner: FleetPlanner | None = fleet_planner(
            FleetActions(
                schedule_tick=actions.schedule_tick,
                start_instance=self.new_instance,
                update_routes=actions.update_routes,
                resteer_orphans=actions.resteer_orphans,
                count_scale_event=self._count_scale_event,
                settle_energy=self.settle_energy,
            )
        )
        """The epoch planner, ScaleShard's pool manager, or None."""

    # -- set-up ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start every instance warm (sized for peak), then let reactive policies trim."""
        view = self.view
        modes = view.policy.plan_tps
        shared = bool(modes) or view.policy.plan_group_pools
        for pool in view.pools:
            if modes and pool.config.tp != max(modes):
                continue  # TP modes share GPUs: the bootstrap fleet is the largest mode's
            for _ in range(pool.max_instances):
                try:
                    self._new(pool, 0.0, warm=True)
                except NodeFullError:
                    if not shared:
                        raise
                    break  # group pools share GPUs: the bootstrap fills them in pool order
        self.actions.update_routes(0.0)
        control = view.scenario.control
        self.actions.schedule_tick(control.sample_period_s, self._sample_tick)
        if self.use_miad or self.use_profile:
            self.actions.schedule_tick(self.clock_period_s, self._dvfs_tick)
        if view.policy.scaling == "reactive":
            self.actions.schedule_tick(control.scale_period_s, self.scaler.tick)
        if view.policy.router_view == "stats":
            # The heartbeat's phase against the trace is whatever the workers' start-up made it.
            self.actions.schedule_tick(
                control.stats_phase_s % control.stats_period_s or control.stats_period_s,
                self._stats_tick,
            )
        if self.planner is not None:
            self.actions.schedule_tick(0.0, self._plan_tick)

    def _plan_tick(self, t_s: float) -> bool:
        assert self.planner is not None
        self.actions.schedule_tick(self.planner.tick(t_s), self._plan_tick)
        return False

    def _count_scale_event(self) -> None:
        self.scale_events += 1

    def new_instance(self, pool: Any, t_s: float) -> SimInstance | None:
        """Start a cold instance (start delay) with the policy's clock controller."""
        return self._new(pool, t_s, warm=False)

    def _new(self, pool: Any, t_s: float, *, warm: bool) -> SimInstance | None:
        instance = self.actions.start_instance(pool, t_s, warm=warm)
        if instance is not None and self.use_profile:
            instance.controller = self._profile_policy(instance.engine.config)
        if instance is not None and self.use_miad:
            from services.dvfs.miad import MiadController

            instance.controller = MiadController(
                slo_miad_config(
                    self.view.slos,
                    guard=self.view.policy.miad_guard,
                    floor_mhz=self._floor(instance.engine.config),
                    period_s=self.view.scenario.control.dvfs_period_s,
                    queue_triggers=self.view.policy.miad_queue_triggers,
                )
            )
        return instance

    def _profile_policy(self, config: Any) -> Any:
        """DynamoLLM's instance manager for an instance of ``config`` (profile swept once, on
        that configuration: the scenario's batch limits, not the engine defaults).

        The profile is swept with the trace's own lengths (DynamoLLM profiles the classes it
        will serve before deployment) and the policy holds it to the scheme's loosest TTFT
        and strictest TBT SLO, each class's own bounds driving the emergency, as the live
        agent's ``profile`` mode does (``services/dvfs/profile_live.py``).
        """
        from services.dvfs.profile_build import profile_of_lengths
        from services.dvfs.profile_live import live_profile_policy

        view = self.view
        table = self._profiles.get(config)
        if table is None:
            prompts = [t.prompt_tokens for t in view.trace]
            outputs = [t.output_tokens for t in view.trace]
            table = self._profiles[config] = profile_of_lengths(
                config, prompts, outputs, partition="cluster", name="trace"
            )
        served = frozenset(view.slos)
        return live_profile_policy(table, view.slos, served, period_s=self.clock_period_s)

    def _served_floor(self, pool_id: str, config: Any) -> float:
        """The SLO floor of the long prompts a pool is sent (0 when none applies).

        The floor of :meth:`_floor` covers the bounded input buckets only. A pool that
        serves the open-ended long-input bucket also needs its long prompts' first token in
        time, and how long they are is what the planner observes (its served sizes,
        ``plan_observed_sizes``): the observed p99 prompt of that bucket stands for it, and
        the maximum clock until the sample is trusted (:func:`served_floor_mhz`).
        """
        planner = self.planner
        view = self.view
        observed = getattr(planner, "observed", None)
        if observed is None or not view.policy.miad_slo_floor:
            return 0.0
        pool = view.pool_by_id.get(pool_id)
        if pool is None or pool.class_group == "short":
            return 0.0
        return served_floor_mhz(
            config,
            view.scheme,
            view.slos,
            view.policy.miad_guard,
            serves_open=True,
            sample_trusted=observed.trusted,
            open_prompt=observed.open_bucket_p99(),
        )

    def _floor(self, config: Any) -> float:
        """MIAD's f_min: FREESH's 300 MHz, or the SLO floor when the policy asks for it."""
        view = self.view
        return miad_floor_mhz(
            config,
            view.scheme,
            view.slos,
            view.policy.miad_guard,
            slo_floor=view.policy.miad_slo_floor,
        )

    def on_finish(self, state: RequestState) -> None:
        """Count whether a finished request met its class SLO (the scaler's feedback)."""
        slo = self.view.slos.get(state.request_class)
        if self.planner is not None:
            self.planner.observe(state)
        if slo is None:
            self.scaler.on_finish(missed=False)
            return
        ttft = state.first_s - state.arrival_s
        tbt = (state.last_s - state.first_s) / (state.tokens - 1) if state.tokens > 1 else 0.0
        late = state.last_s - state.arrival_s > SLO_WINDOW_FACTOR * state.lat_s
        missed = ttft > slo.ttft_ms / 1000.0 or tbt > slo.tbt_ms / 1000.0 or late
        self.scaler.on_finish(missed=missed)

    def on_arrival(self, t_s: float) -> None:
        """Track the peak load the reactive scaler sizes for."""
        self.scaler.on_arrival()

    # -- ticks --------------------------------------------------------------------------
    def _all_instances(self) -> list[SimInstance]:
        return [i for p in self.view.pools for i in p.instances]

    def _sample_tick(self, t_s: float) -> bool:
        view = self.view
        self._account(t_s)
        for pool in view.pools:
            self.actions.dispatch(pool, t_s)
        self._retire_drained(t_s)
        if view.policy.scaling == "reactive":
            self.scaler.scale_out_if_congested(t_s)
        if view.progress is not None and view.trace:
            view.progress(min(1.0, t_s / max(view.trace[-1].t_s, 1e-9)))
        done = view.outstanding == 0 and len(view.states) == len(view.trace)
        if done:
            self.end_s = t_s
            self._finish(t_s)
        else:
            self.actions.schedule_tick(
                t_s + view.scenario.control.sample_period_s, self._sample_tick
            )
        return done

    def _account(self, t_s: float) -> None:
        view = self.view
        dt = max(t_s - self._last_sample_s, 1e-9)
        power = 0.0
        co2 = 0.0
        by_region: dict[str, float] = defaultdict(float)
        clock_sum = 0.0
        gpus = 0
        for instance in self._all_instances():
            instance.advance(t_s)
            delta = self._take_energy(instance)
            co2 += self._charge(instance.region, delta, t_s, dt)
            power += delta / dt
            by_region[instance.region] += delta / dt
            clock_sum += instance.engine.clock_mhz * instance.gpus
            gpus += instance.gpus
        powered = view.nodes.powered_count()
        self.max_gpus = max(self.max_gpus, gpus)
        self.max_instances = max(self.max_instances, len(self._all_instances()))
        bare, node_s = view.nodes.account(self._last_sample_s, t_s)
        counted = self._counted_share(t_s, dt)
        for region, joules in bare.items():
            co2 += self._charge(region, joules, t_s, dt)
            self.bare_energy_j += joules * counted
            power += joules / dt
            by_region[region] += joules / dt
        self.gpu_seconds += gpus * dt * counted
        self.node_seconds += node_s * counted
        s = self.series
        s.t_s.append(t_s)
        s.power_w.append(power)
        s.clock_mhz.append(clock_sum / gpus if gpus else 0.0)
        s.active_gpus.append(gpus)
        s.powered_nodes.append(powered)
        s.co2_g_per_s.append(co2 / dt)
        s.queued.append(sum(len(p.queue) for p in view.pools))
        s.outstanding.append(view.outstanding)
        for region in {r.name for r in view.scenario.regions}:
            s.power_w_by_region.setdefault(region, []).append(by_region.get(region, 0.0))
        self._last_sample_s = t_s

    def _take_energy(self, instance: SimInstance) -> float:
        key = id(instance)
        total = instance.engine.energy_j
        delta = total - self._seen_j.get(key, 0.0)
        self._seen_j[key] = total
        return delta

    def settle_energy(self, instance: SimInstance, t_s: float) -> None:
        """Book ``instance``'s energy up to ``t_s`` now, before the sample tick would.

        A re-shard hands the same GPUs to new instances at ``t_s``; the energy is booked as
        a point at ``t_s`` (intensity and measured window of that instant).
        """
        self._charge(instance.region, self._take_energy(instance), t_s, 0.0)

    def _counted_share(self, t_s: float, dt: float) -> float:
        """Share of ``(t_s - dt, t_s]`` inside the measured window (after the warm-up)."""
        start = self.view.measure_from_s
        if t_s <= start:
            return 0.0
        if dt <= 0.0 or t_s - dt >= start:
            return 1.0
        return (t_s - start) / dt

    def _charge(self, region: str, joules: float, t_s: float, dt: float) -> float:
        """Book ``joules`` used over ``(t_s - dt, t_s]`` in ``region``; return their grams CO2.

        Only the share inside the measured window enters the totals; the whole is returned
        (for the time series).
        """
        grams = joules / JOULES_PER_KWH * self.view.carbon.intensity(region, t_s - dt / 2)
        counted = self._counted_share(t_s, dt)
        self.energy_j += joules * counted
        self.co2_g += grams * counted
        self.energy_by_region[region] += joules * counted
        self.co2_by_region[region] += grams * counted
        return grams

    def _retire_drained(self, t_s: float) -> None:
        for pool in self.view.pools:
            for instance in [i for i in pool.instances if i.draining and not i.requests]:
                self.actions.retire(instance, t_s)

    def _finish(self, t_s: float) -> None:
        for pool in self.view.pools:
            for instance in list(pool.instances):
                self.actions.retire(instance, t_s)

    def _stats_tick(self, t_s: float) -> bool:
        """Every worker's stats heartbeat: the router's KV view catches up."""
        for instance in self._all_instances():
            if instance.ready_s <= t_s:
                instance.advance(t_s)
                instance.kv_seen = instance.engine.kv_blocks_used
        self.actions.schedule_tick(
            t_s + self.view.scenario.control.stats_period_s, self._stats_tick
        )
        return False

    def _dvfs_tick(self, t_s: float) -> bool:
        from loadgen.instance_sim import engine_observation
        from services.dvfs.controller import LatencyWindow

        view = self.view
        stall = view.scenario.delays.clock_change_s
        for instance in self._all_instances():
            if instance.ready_s > t_s or instance.controller is None:
                continue
            instance.advance(t_s)
            engine = instance.engine
            windows = {
                name: LatencyWindow(
                    ttft_s=tuple(s.ttft_s), tbt_s=tuple(s.tbt_s), e2e_s=tuple(s.e2e_s)
                )
                for name, s in instance.take_samples().items()
            }
            load_rps = instance.placed / self.clock_period_s
            instance.placed = 0
            observation = engine_observation(
                engine, now_s=t_s, latencies=windows, arrival_rate_rps=load_rps
            )
            target = instance.controller.decide(observation)  # type: ignore[attr-defined]
            boost = getattr(self.planner, "clock_boosted", None)
            if boost is not None and boost(instance.pool_id, t_s):
                target = max(engine.supported_clocks_mhz)
            else:
                # The plan's clock caps MIAD (the live dvfs agent's pool_clock_caps), as live.
                caps = self.planner.clock_caps if self.planner is not None else {}
                target = capped_clock(
                    target,
                    cap_mhz=caps.get(instance.pool_id),
                    floor_mhz=self._floor(engine.config),
                    served_floor_mhz=self._served_floor(instance.pool_id, engine.config),
                )
            if abs(target - engine.clock_mhz) > 0.5:
                engine.set_clock_mhz(target)
                instance.stall(stall)
                self.clock_changes += 1
        self.actions.schedule_tick(t_s + self.clock_period_s, self._dvfs_tick)
        return False
