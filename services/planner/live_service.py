"""The ``milp`` planner loop: live inputs → FREESH Eq. 1 → overhead gate → published plan.

Every epoch (model time) the planner reads the fleet from the workers' Redis registrations,
the latest carbon forecast per region from Redis, and the demand it observed on
``request.done``; it solves Eq. 1 with the clock dimension and decides each pool
(:func:`services.planner.epoch_step.step`, the step the simulator's epoch planner calls
too; :func:`~services.planner.milp.solve_plan`'s time limit and feasible fallbacks),
compares the result with the running plan through DynamoLLM's overhead gate, and publishes
the winner. Until it has demand history, profiles and a fleet it publishes a bootstrap plan
(everyone serves). A failed solve keeps the last good plan.

With ``planner.class_groups = "input-split"`` every pool serves the long-input classes or the
others (the MILP's exclusive class groups, applied when there are at least as many pools as
groups); with ``planner.mixed_capacity`` each mode's rows are scaled by the capacity measured
on the trace's class mix (per group when split), as the simulator's planned sets do.

Between epochs the plan is re-published every ``republish_wall_s``; a pool planned to zero
keeps one worker while the scheduler still reports queued work for it
(``scheduler.ready.<pool>``), so no request is stranded behind parked workers.

:class:`LivePlanner` decides; its bases hold what feeds the decision: what it reads from the
bus and Redis (:mod:`services.planner.live_readings`) and the profile rows of each pool with
their measurement in a child process (:mod:`services.planner.profile_jobs`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from proto.messages import Plan as WirePlan
from services.planner import epoch_step
from services.planner.freesh_instance import load_profiles_csv
from services.planner.live_inputs import DemandTracker, LivePool
from services.planner.live_plan import (
    build_live_problem,
    input_groups,
    pool_allocations,
    with_added_instances,
)
from services.planner.live_profiles import reference_lengths, scheme_name_for, slo_policy_for
from services.planner.live_readings import LiveReadings
from services.planner.overhead_gate import TransitionCosts, gate_plans
from services.planner.plan_coverage import replan_problem
from services.planner.plan_wire import bootstrap_plan, merged_plan, wire_plan
from services.planner.problem import (
    Objective,
    PlannerSettings,
    ServingConfig,
    Solver,
)
from services.planner.profile_jobs import ProfileJobs, ProfileKey
from services.planner.running_plan import RunningPlan, growth_hosts_of
from services.planner.slo_feedback import (
    CapacityFeedback,
    FeedbackSettings,
    MissWindow,
)
from shared.counters import PLANNER_ADDED_INSTANCES, PLANNER_SOLVE_S
from shared.domain.classes import default_slos, scheme_by_name
from shared.domain.load_forecast import LOAD_METHODS, LoadForecastConfig
from shared.domain.observed_mix import ObservedMix, ObservedMixSettings
from shared.lifecycle import ServiceContext

__all__ = ["LivePlanner", "ProfileKey"]

logger = logging.getLogger(__name__)

SLO_GOAL = 0.99
"""Share of requests a pool must serve within SLO (the fleet's goal; the simulator's
``ScalerSettings.slo_goal``)."""
MISS_MIN_REQUESTS = 20
"""Completions a pool's window needs before its miss rate is trusted (the simulator's
``ScalerSettings.min_window_requests``)."""


class LivePlanner(LiveReadings, ProfileJobs):
    """State of the ``milp`` planner between epochs."""

    def __init__(self, ctx: ServiceContext) -> None:
        """Read settings and the profiles CSV; nothing is measured yet."""
        self._ctx = ctx
        cfg = self._cfg = ctx.settings.planner
        if cfg.load_method not in LOAD_METHODS:
            raise ValueError(f"planner.load_method must be one of {LOAD_METHODS}")
        self._csv: tuple[ServingConfig, ...] = (
            load_profiles_csv(cfg.profiles_csv) if cfg.profiles_csv is not None else ()
        )
        partitions = {c.partition for c in self._csv} | {cfg.scheme}
        schemes = {p: scheme_by_name(scheme_name_for(p)) for p in sorted(partitions)}
        self._schemes = schemes
        own = scheme_by_name(scheme_name_for(cfg.scheme))
        self._groups: dict[str, str] = (
            input_groups(own.classes, own.labels) if cfg.class_groups == "input-split" else {}
        )
        step_s = cfg.epoch_s / cfg.steps_per_epoch
        bins = max(1, round(step_s / cfg.demand_bin_s))
        self._load_config = LoadForecastConfig(
            bin_s=step_s / bins,
            step_s=step_s,
            steps=cfg.steps_per_epoch,
            method=cfg.load_method,  # checked above
            recent_steps=cfg.recent_steps,
        )
        self._slos = default_slos(own)
        self._observed = (
            ObservedMix(
                own,
                ObservedMixSettings(
                    sample=cfg.observed_sample, min_requests=cfg.observed_min_requests
                ),
            )
            if cfg.observed_profiles
            else None
        )
        self._profiled_on: tuple[tuple[int, int], ...] = ()
        """Served lengths the newest profiles are measured on (empty: the reference's)."""
        self._lengths_version = 0
        self._misses = (
            MissWindow(step_s, goal=SLO_GOAL, min_requests=MISS_MIN_REQUESTS, bin_s=step_s / bins,
                       coincident=cfg.coincident_demand)
            if cfg.slo_feedback
            else None
        )  # fmt: skip
        self._learned = CapacityFeedback(
            FeedbackSettings(
                step=cfg.feedback_step,
                floor=cfg.feedback_floor,
                boost=cfg.feedback_boost,
                replan=cfg.feedback_replan,
                grow_limit=cfg.feedback_grow,
            )
        )
        self._step_s = step_s
        self._demands: dict[str, DemandTracker] = {}
        """Observed arrivals per model: a model's pools serve its demand alone."""
        self._measured: dict[ProfileKey, tuple[ServingConfig, ...]] = {}
        self._measuring: dict[ProfileKey, asyncio.Task[tuple[ServingConfig, ...]]] = {}
        self._max_num_seqs: dict[str, int] = {}
        self._idle: dict[tuple[str, int, str, int], float] = {}
        self._last_intensity: dict[str, float] = {}
        self._ready_wall: dict[str, float] = {}
        self._running: dict[str, RunningPlan] = {}
        """The MILP plan in force per model (absent: the model is bootstrapping)."""
        self._model_plans: dict[str, WirePlan] = {}
        """The latest plan per model, merged into :attr:`plan`."""
        self._bootstrapping = True
        self.epoch = -1
        self.plan: WirePlan | None = None

    def wants_replan(self) -> bool:
        """Between epochs: whether the served sizes drifted from the profiled ones (start
        re-profiling them) or a pool missed its SLO (learn its capacity, boost its clock)."""
        if not self._running:
            return False
        now = self._ctx.clock.now()
        due = False
        if self._observed is not None and self._observed.drifted(
            self._profiled_on or reference_lengths()
        ):
            sample = self._observed.sample()
            assert sample is not None  # drifted() needs one
            self._profiled_on = sample
            self._lengths_version += 1
            self._learned.reset()
            logger.info(
                "served request sizes drifted from the profiled ones: re-profiling on %d",
                len(sample),
            )
            due = True
        if self._misses is not None:
            planned = {
                pid: sum(d.capacity_by_class.values())
                for running in self._running.values()
                for pid, d in running.decisions.items()
            }
            overloaded = self._misses.overloaded(now)
            if overloaded:
                logger.warning("pools missing their SLO: %s", sorted(overloaded))
            grown = self._grow(now, planned)  # before learn() extends the boosts it judges
            if self._learned.learn(overloaded, planned, now, self._step_s):
                self._misses.clear()  # the next plan is judged on its own completions
                due = True
            elif overloaded or grown:
                self._misses.clear()  # a boost is judged on its own completions too
                self.refresh()  # publish the boosted clocks and added instances now
        return due

    def _grow(self, now: float, planned: dict[str, float]) -> bool:
        """SLO feedback's added instances: a pool that still misses at the maximum clock
        gets one more of its parked workers in the plan (no re-plan), or, with none left,
        one of a pool of its mode (GPU type, TP, model, class group) elsewhere; one added
        for a pool that has met its SLO for a hold since goes. Whether any changed."""
        assert self._misses is not None
        if self._cfg.feedback_grow <= 0:
            return False
        gone = self._learned.expire(now)
        for short, host in gone:
            logger.info("pool %s met its SLO for a hold: its instance in %s goes", short, host)
        hosts: dict[str, tuple[str, ...]] = {}
        for running in self._running.values():
            hosts |= growth_hosts_of(running, self._learned.added)
        grown = self._learned.grow(self._misses, now, hosts, planned)
        for short, host in grown:
            # A parked worker holds its model: the planner's start-up time bounds its wake.
            self._learned.started(short, host, now + self._cfg.start_s, self._step_s)
            logger.warning("pool %s still misses at its maximum clock: one more in %s", short, host)
            PLANNER_ADDED_INSTANCES.labels(host).inc()
        return bool(grown or gone)

    def _class_groups(self, pools: dict[str, LivePool]) -> dict[str, str]:
        """The configured exclusive groups, or none when the fleet has fewer pools than
        groups (one pool cannot serve two exclusive groups: Eq. 1b would be infeasible)."""
        return self._groups if len(pools) >= len(set(self._groups.values())) else {}

    async def plan_epoch(self, epoch: int) -> None:
        """Plan one epoch (or bootstrap) per model and keep the merged result as ``self.plan``.

        Each model's pools are planned for that model's observed demand alone (a worker
        serves only its model's requests): one Eq. 1 per model, each with its own overhead
        gate, bootstrapping until that model has demand history and profiles.
        """
        issued, valid = time.time(), time.time() + self._ctx.clock.wall_period(self._cfg.epoch_s)
        pools = {k: p for k, p in (await self._inventory()).items() if p.workers}
        self.epoch = epoch
        if not pools:
            self.plan = None  # the shell publishes the static plan
            self._running.clear()
            self._model_plans.clear()
            self._bootstrapping = True
            return
        by_model: dict[str, dict[str, LivePool]] = {}
        for pool_id, pool in sorted(pools.items()):
            by_model.setdefault(pool.model, {})[pool_id] = pool
        for model in [m for m in self._running if m not in by_model]:
            del self._running[model]
        # Each epoch's plan is sized for the load that missed: feedback's added instances
        # are its to keep or drop.
        self._learned.new_plan()
        self._model_plans = {
            model: await self._plan_model(model, group, epoch, issued, valid)
            for model, group in sorted(by_model.items())
        }
        self._bootstrapping = any(m not in self._running for m in by_model)
        self.plan = merged_plan(list(self._model_plans.values()))

    async def _plan_model(
        self, model: str, pools: dict[str, LivePool], epoch: int, issued: float, valid: float
    ) -> WirePlan:
        """One model's plan: bootstrap, or Eq. 1 over its pools and its demand."""
        cfg, now = self._cfg, self._ctx.clock.now()
        demand = self._demand(model)
        groups = self._class_groups(pools)
        profiles = self._profiles(pools, groups)
        if len(profiles) < len(pools) or demand.observed_steps(now) < 1:
            self._running.pop(model, None)
            return bootstrap_plan(
                pools, scheme=cfg.scheme, epoch=epoch, issued_at=issued, valid_until=valid
            )
        regions = sorted({p.region for p in pools.values()})
        intensity = await self._intensity(regions, epoch * cfg.epoch_s)
        partitions = sorted({c.partition for rows in profiles.values() for c in rows})
        keys = [(p, cls) for p in partitions for cls in self._schemes[p].classes]
        problem = build_live_problem(
            pools=pools, profiles=profiles, demand_qps=demand.forecast(now, keys),
            intensity=intensity, step_s=cfg.epoch_s / cfg.steps_per_epoch, alpha=cfg.alpha,
            slo=slo_policy_for(partitions), slices=cfg.time_share_slices, class_groups=groups,
            instance_idle_w=self._idle_w(pools) if cfg.whole_instances else None,
        )  # fmt: skip
        running = self._running.get(model)
        covers = False  # no running plan on these pools: nothing to keep or hold
        if running is not None and running.pools == pools:
            held = {pid: d.instances for pid, d in running.decisions.items()}
            covers, problem = replan_problem(
                problem, running.core.allocations, held, cfg.time_share_slices,
                running.core.partition, within_epoch=running.epoch == epoch,
            )  # fmt: skip
        settings = PlannerSettings(
            objective=Objective(cfg.objective), solver=Solver(cfg.solver),
            time_limit_s=cfg.time_limit_s, mip_rel_gap=cfg.mip_rel_gap,
            primary_slack=cfg.primary_slack,
        )  # fmt: skip
        with self._ctx.tracer.start_as_current_span(
            "plan_epoch",
            attributes={
                "planner.epoch": epoch,
                "planner.pools": len(pools),
                "planner.model": model,
            },
        ) as span:
            epoch_decision = await asyncio.to_thread(
                epoch_step.step, problem, settings, pools, cfg.time_share_slices, intensity
            )
            core = epoch_decision.core
            span.set_attribute("planner.status", core.status.value)
            span.set_attribute("planner.solve_s", core.solve_s)
        PLANNER_SOLVE_S.labels(core.status.value).observe(core.solve_s)
        candidate = RunningPlan(
            core, epoch_decision.decisions, pools, epoch_decision.fallback_order, groups, epoch
        )
        if running is not None and self._keep_running(running, candidate, covers, intensity):
            running.fallback_order = epoch_decision.fallback_order
            running.epoch = epoch  # kept into this epoch: its re-plans may only add to it
        else:
            running = self._running[model] = candidate
        logger.info(
            "plan epoch %d, %s: %s, peak demand %.3g qps, instances %s", epoch, model,
            core.status.value, sum(max(v) for v in problem.demand_qps.values()),
            {pid: d.instances for pid, d in running.decisions.items()},
        )  # fmt: skip
        return self._wire(running, epoch, issued, valid)

    def _keep_running(
        self,
        old: RunningPlan,
        new: RunningPlan,
        old_covers: bool,
        intensity: dict[str, tuple[float, ...]],
    ) -> bool:
        """DynamoLLM's gate: keep the running plan unless switching pays for itself;
        ``old_covers``: whether the running plan covers the new forecast."""
        if (
            old.pools != new.pools
            or old.core.partition != new.core.partition
            or old.class_groups != new.class_groups
        ):
            return False
        weight = None
        if self._cfg.objective == Objective.CARBON:
            weight = {r: sum(v) / len(v) for r, v in intensity.items()}
        decision = gate_plans(
            pool_allocations(old.decisions, old.pools),
            pool_allocations(new.decisions, new.pools),
            remaining_s=self._cfg.epoch_s,
            costs=TransitionCosts(
                start_s=self._cfg.start_s, start_power_w_per_gpu=self._cfg.start_power_w_per_gpu
            ),
            old_covers_demand=old_covers,
            region_weight=weight,
            margin=self._cfg.gate_margin,
        )
        logger.info("overhead gate: %s", decision.reason)
        return not decision.reconfigure

    def _wire(self, running: RunningPlan, epoch: int, issued: float, valid: float) -> WirePlan:
        now = time.time()
        busy = frozenset(
            pid
            for pid, seen in self._ready_wall.items()
            if now - seen <= self._cfg.drain_grace_wall_s
        )
        model_now = self._ctx.clock.now()
        decisions = {
            pid: dataclasses.replace(d, clock_mhz=None)
            if self._learned.boosted(pid, model_now)
            else d
            for pid, d in with_added_instances(running.decisions, self._learned.added).items()
            if pid in running.pools
        }
        return wire_plan(
            decisions=decisions,
            pools=running.pools,
            partition=running.core.partition,
            epoch=epoch,
            issued_at=issued,
            valid_until=valid,
            objective=self._cfg.objective,
            status=running.core.status.value,
            keep_one=busy,
            fallback_order=running.fallback_order,
            class_groups=running.class_groups,
        )

    @property
    def bootstrapping(self) -> bool:
        """True until every model has its first MILP plan: the shell then re-plans on
        every tick."""
        return self._bootstrapping

    def refresh(self) -> None:
        """Re-derive the current plan's kept-for-draining pools (between epochs)."""
        if self.plan is None or not self._running:
            return
        plan = self.plan
        for model, running in self._running.items():
            if model in self._model_plans:
                self._model_plans[model] = self._wire(
                    running, plan.epoch, plan.issued_at, plan.valid_until
                )
        self.plan = merged_plan(list(self._model_plans.values()))
