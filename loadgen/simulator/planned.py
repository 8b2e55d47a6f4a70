"""The epoch planner in the simulator: the live ``milp`` planner's cores in virtual time.

Every epoch (``control.epoch_s``, six steps of ``epoch_s / steps_per_epoch``) the simulator
builds FREESH Eq. 1 with DynamoLLM's clock dimension from the same functions the live
planner (``services/planner/live_service.py``) calls:

* fleet: one :class:`~services.planner.live_inputs.LivePool` per simulated pool (region ×
  GPU type × the policy's TP), one worker per instance slot of the scenario inventory;
* profiles: :func:`~services.planner.live_profiles.measure_mode_profiles` on the engine
  model, measured once per mode and cached for the process;
* demand: :class:`~services.planner.live_inputs.DemandTracker` fed with the simulator's own
  completions (arrival time, true sizes, E2E), so its history ends ``p90(E2E)`` before now
  exactly as live; the forecast is the per-class peak QPS of the next steps;
* intensity: :meth:`services.forecaster.models.CarbonForecaster.forecast` issued at the
  epoch's start hour (inputs end 1 h before it: no look-ahead), fitted once per region on
  the EIA history before the scenario's start; the energy objective (FREESH's MinEnergy)
  uses λ = 1.

Then the live planner's epoch step, :func:`services.planner.epoch_step.step` (solve, and
per-pool decisions), and :func:`~services.planner.live_plan.wire_plan` turn the solution
into instance counts, per-class routes and pool clock caps. Changes are
make-before-break: new instances start (``delays.instance_start_s``), and only when they are
ready do routes switch and surplus instances drain. Until one whole step of demand history
exists the fleet keeps the bootstrap (every instance on, routes by instance count), re-checked
every sample period (the live planner re-checks on every republish); a failed epoch keeps the
last plan, as live. As live, a new solution replaces the plan in force only when DynamoLLM's
overhead gate accepts it (:mod:`loadgen.simulator.gate`; policy field ``overhead_gate``).

Simulator-side fixes, chosen per policy set and passed only through the planner's public
inputs: ``replan="event"`` also re-plans when the last step's observed peak demand exceeds
α × the plan's forecast; ``demand_forecast="trend"`` adds the recent least-squares trend
(:mod:`loadgen.simulator.demand`); ``plan_ttft_margin`` scales the TTFT limits of FREESH
Eq. 1e so only rows with that much SLO headroom are eligible; ``plan_mix_goal`` scales each
mode's rows by the capacity measured on the trace's class mix
(:mod:`services.planner.mixed_profiles`); ``plan_split_long_input`` gives the MILP exclusive
class groups (a pool serves the long-input classes or the others, DynamoLLM's pools per
request type); ``slo_feedback`` re-plans when a pool's observed misses are significantly
above the goal, de-rating that pool (:mod:`loadgen.simulator.feedback`); ``plan_alpha``
measures α from the forecast's past errors.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import pandas as pd

from loadgen.simulator.demand import ArrivalHistory, forecast_error_alpha
from loadgen.simulator.feedback import SloFeedback
from loadgen.simulator.gate import PlanGate
from loadgen.simulator.mode_switch import make_room, missing_instances, start_wanted
from loadgen.simulator.nodes import drain_order
from proto.messages import Plan as WirePlan
from services.planner import epoch_step
from services.planner.errors import InfeasiblePlanError
from services.planner.live_inputs import DemandTracker, LivePool
from services.planner.live_plan import input_groups, wire_plan
from services.planner.live_profiles import (
    ProfileRequest,
    measure_mode_profiles,
    mode_idle_w,
    reference_lengths,
    slo_policy_for,
)
from services.planner.mixed_profiles import (
    MixedCapacity,
    MixedLoad,
    MixRequest,
    derate_rows,
    trace_mix,
)
from services.planner.problem import Objective, PlannerSettings, ServingConfig, SloPolicy
from services.planner.slo_feedback import CapacityFeedback, FeedbackSettings
from shared.config import PlannerSettings as LivePlannerSettings
from shared.domain.classes import scheme_by_name
from shared.domain.load_forecast import LoadForecastConfig
from shared.domain.observed_mix import ObservedMix, profile_lengths

if TYPE_CHECKING:
    from loadgen.simulator.cluster import ClusterSimulator
    from loadgen.simulator.instance import RequestState
    from services.forecaster.models import CarbonForecaster
    from services.forecaster.sources import CarbonHistory

__all__ = ["EpochPlanner", "fitted_forecaster", "input_groups", "mode_profiles"]

FORECAST_HORIZON_H = 6
"""Hours the simulator's carbon forecaster is fitted for (an epoch needs at most two)."""


@functools.lru_cache(maxsize=16)
def mode_profiles(request: ProfileRequest) -> tuple[ServingConfig, ...]:
    """Profile rows of one mode, measured once per process (≈ 3–5 s each)."""
    return measure_mode_profiles(request)


@functools.lru_cache(maxsize=16)
def mixed_mode_profiles(
    request: ProfileRequest,
    goal: float,
    groups: tuple[tuple[str, str], ...] = (),
    mix: tuple[MixRequest, ...] | None = None,
) -> tuple[tuple[ServingConfig, ...], tuple[MixedCapacity, ...]]:
    """One mode's rows scaled by its mixed-class capacity at ``goal`` (once per process),
    per exclusive class group when ``groups`` ((class, group) pairs) is given, on ``mix``
    (``None``: the reference trace's)."""
    scheme = scheme_by_name(request.scheme)
    return derate_rows(
        mode_profiles(request),
        gpu=request.gpu,
        model=request.model,
        scheme=request.scheme,
        max_num_seqs=request.max_num_seqs,
        mix=_trace_mix(scheme.name) if mix is None else mix,
        load=MixedLoad(goal=goal),
        groups=dict(groups),
    )


@functools.lru_cache(maxsize=4)
def _trace_mix(scheme: str) -> tuple[MixRequest, ...]:
    return trace_mix(scheme_by_name(scheme))


def _history(code: str) -> CarbonHistory:
    from loadgen.simulator.carbon import zone_history

    return zone_history(code)


@functools.lru_cache(maxsize=16)
def fitted_forecaster(code: str, start_utc: pd.Timestamp) -> CarbonForecaster:
    """The carbon forecaster of one grid zone, fitted on history ending before ``start_utc``."""
    from loadgen.simulator.carbon import zone_source
    from services.forecaster.config import ForecasterConfig, config_for
    from services.forecaster.models import fit_forecaster

    history = _history(code).until(start_utc.floor("h") - pd.Timedelta(hours=1))
    # An Electricity Maps zone gets the settings the service fits it with (config_for).
    config = config_for(zone_source(code), ForecasterConfig(horizon_h=FORECAST_HORIZON_H))
    return fit_forecaster(history, config=config)


class EpochPlanner:
    """Plans one simulation's fleet every epoch and applies the plan to its pools."""

    def __init__(self, sim: ClusterSimulator, objective: Objective) -> None:
        """Bind to a simulator; profiles and forecasters are prepared here (cached)."""
        self.sim = sim
        self.objective = objective
        self.live = LivePlannerSettings()
        self.slices = sim.policy.plan_slices or self.live.time_share_slices
        """Slices per instance (K): a class's capacity in a pool comes in 1/K instances."""
        control = sim.scenario.control
        self.epoch_s = control.epoch_s
        self.step_s = control.epoch_s / control.steps_per_epoch
        self.steps = control.steps_per_epoch
        self.scheme = scheme_by_name(sim.scenario.slo.scheme)
        bin_s = sim.policy.plan_demand_bin_s or self.live.demand_bin_s
        bins = max(1, round(self.step_s / bin_s))
        coincident = sim.policy.plan_demand == "coincident"
        load_config = LoadForecastConfig(
            bin_s=self.step_s / bins,
            step_s=self.step_s,
            steps=self.steps,
            method=self.live.load_method,  # type: ignore[arg-type]
            recent_steps=self.live.recent_steps,
        )
        self.demand = DemandTracker(
            {self.scheme.name: self.scheme},
            load_config,
            self.live.demand_history_steps,
            coincident=coincident,
        )
        # The same completions, kept per class for the event trigger and the trend forecast.
        self.history = ArrivalHistory(load_config, self.live.demand_history_steps)
        self.planned_qps: float | None = None
        """Total per-class peak QPS the plan in force is sized for (α × its forecast); a
        re-plan the overhead gate rejects leaves it as it was."""
        self.covered_qps: float | None = None
        """The demand the plan in force is known to cover: ``planned_qps``, or more once the
        gate rejected a re-plan sized for more. The gate rejects only a plan whose
        predecessor still covers α × its forecast (FREESH Eq. 1b, ``old_covers_demand``), so
        the event trigger waits for the load to outgrow that, not ``planned_qps``: asked
        again below it, the gate gives the same answer, a solve every sample period."""
        self.pools = {
            p.pool_id: LivePool(
                pool_id=p.pool_id,
                region=p.region,
                gpu=p.gpu,
                tp=p.config.tp,
                model=sim.scenario.model,
                workers=tuple(f"{p.pool_id}#{k}" for k in range(p.max_instances)),
            )
            for p in sim.pools
        }
        self.class_groups = (
            input_groups(self.scheme.classes, self.scheme.labels)
            if sim.policy.plan_split_long_input
            else {}
        )
        self.observed = ObservedMix(self.scheme) if sim.policy.plan_observed_sizes else None
        """Served request sizes; the planner re-profiles when they drift (observed_mix)."""
        self.profiled_on: tuple[tuple[int, int], ...] = reference_lengths()
        """The lengths the profiles in use were measured on."""
        self.reprofiles: list[float] = []
        self.profiles: dict[str, tuple[ServingConfig, ...]] = {}
        self.mix_capacity: dict[str, tuple[MixedCapacity, ...]] = {}
        self._measure_profiles(None)
        self.feedback = (
            SloFeedback(sim, self.step_s, load_config.bin_s, coincident=coincident)
            if sim.policy.slo_feedback
            else None
        )
        self.switching = False
        """A plan is waiting for its instances: no feedback until it is in place."""
        self._waiting: tuple[dict[str, int], Callable[[float], bool]] | None = None
        """A plan whose instances wait for GPUs its other TP modes hold: (want, switch)."""
        self._mode = {p.pool_id: (p.gpu, p.config.tp, p.class_group) for p in sim.pools}
        """Per pool: (GPU type, TP, class group), what pools in other regions share."""
        policy = sim.policy
        self.learned = CapacityFeedback(
            FeedbackSettings(
                step=policy.feedback_step,
                floor=policy.feedback_floor,
                boost=policy.feedback_boost,
                replan=policy.feedback_replan,
            )
        )
        """Per pool: capacity share learned from observed misses, and clock boosts."""
        """Per pool: capacity share learned from observed misses (1: as profiled)."""
        self.capacity: dict[str, float] = {}
        """Per pool: the QPS the current plan's slices give it (Σ over classes)."""
        # The energy objective sees λ = 1 (FREESH MinEnergy), unless its tie-break may trade
        # energy for carbon (plan_primary_slack), which needs the forecast intensity.
        self._forecast_intensity = (
            objective == Objective.CARBON or sim.policy.plan_primary_slack > 0
        )
        codes = {r.name: r.carbon for r in sim.scenario.regions}
        start = pd.Timestamp(sim.scenario.start_utc)
        self.start_utc = start
        self.forecasters = (
            {name: fitted_forecaster(code, start) for name, code in codes.items()}
            if self._forecast_intensity and sim.carbon_forecast is None
            else {}
        )
        self.codes = codes
        self.plan: WirePlan | None = None
        self.clock_caps: dict[str, float] = {}
        self.epochs = 0
        self.solves: list[dict[str, Any]] = []
        self.gate = PlanGate(self)

    def _measure_profiles(self, observed: tuple[tuple[int, int], ...] | None) -> None:
        """Profile every pool's mode (and its mixed-class capacity) on the reference lengths,
        or on ``observed`` ones (the reference's kept for buckets they leave sparse)."""
        sim = self.sim
        prompts: tuple[int, ...] = ()
        outputs: tuple[int, ...] = ()
        mix: tuple[MixRequest, ...] | None = None
        if observed is not None:
            prompts, outputs = profile_lengths(observed, reference_lengths(), self.scheme)
            mix = tuple(MixRequest(p, o, self.scheme.classify(p, o)) for p, o in observed)
        requests = {
            pid: ProfileRequest(
                gpu=pool.gpu,
                tp=pool.tp,
                model=pool.model,
                scheme=self.scheme.name,
                clock_fractions=self.live.profile_clock_fractions,
                window_s=self.live.profile_window_s,
                max_num_seqs=sim.max_num_seqs,
                prompts=prompts,
                outputs=outputs,
            )
            for pid, pool in self.pools.items()
        }
        goal = sim.policy.plan_mix_goal
        groups = tuple(sorted(self.class_groups.items()))
        if goal is None:
            self.profiles = {pid: mode_profiles(r) for pid, r in requests.items()}
        else:
            mixed = {pid: mixed_mode_profiles(r, goal, groups, mix) for pid, r in requests.items()}
            self.profiles = {pid: rows for pid, (rows, _) in mixed.items()}
            self.mix_capacity = {pid: caps for pid, (_, caps) in mixed.items()}
        for p in sim.pools:
            if p.class_group is not None:  # a group's pool is planned for its classes only
                own = {c for c, g in self.class_groups.items() if g == p.class_group}
                self.profiles[p.pool_id] = tuple(
                    r for r in self.profiles[p.pool_id] if r.request_class in own
                )

    def _reprofile_if_drifted(self, t_s: float) -> bool:
        """Re-measure the profiles on the served sizes when they left the profiled ones; a
        learned SLO de-rating was learned against the old profiles, so it starts over."""
        if self.observed is None or not self.observed.drifted(self.profiled_on):
            return False
        sample = self.observed.sample()
        assert sample is not None  # drifted() needs one
        self._measure_profiles(sample)
        self.profiled_on = sample
        self.reprofiles.append(t_s)
        self.learned.reset()
        return True

    # -- inputs -------------------------------------------------------------------------
    def observe(self, state: RequestState) -> None:
        """A completion: the live planner's only demand signal (``request.done``)."""
        if self.observed is not None:
            self.observed.add(state.prompt, max(1, state.tokens))
        self.demand.add(
            state.arrival_s, state.prompt, max(1, state.tokens), state.last_s - state.arrival_s
        )
        self.history.add(state.arrival_s, self.scheme.classify(state.prompt, max(1, state.tokens)))
        if self.feedback is not None:
            self.feedback.add_state(state)

    def intensity(self, t_s: float) -> dict[str, tuple[float, ...]]:
        """Forecast intensity per region at each step of the epoch starting at ``t_s``."""
        regions = sorted({p.region for p in self.pools.values()})
        if not self._forecast_intensity:
            return dict.fromkeys(regions, (1.0,) * self.steps)
        given = self.sim.carbon_forecast
        if given is not None:
            return {
                r: tuple(given(r, t_s + k * self.step_s) for k in range(self.steps))
                for r in regions
            }
        origin = (self.start_utc + pd.Timedelta(seconds=t_s)).floor("h")
        out: dict[str, tuple[float, ...]] = {}
        for region in regions:
            forecast = self.forecasters[region].forecast(
                _history(self.codes[region]), origin, horizon_h=FORECAST_HORIZON_H
            )
            values = []
            for k in range(self.steps):
                at = self.start_utc + pd.Timedelta(seconds=t_s + k * self.step_s)
                index = int((at - origin).total_seconds() // forecast.step_s)
                values.append(forecast.values[min(index, len(forecast.values) - 1)])
            out[region] = tuple(values)
        return out

    # -- epoch ----------------------------------------------------------------------------
    def tick(self, t_s: float) -> float:
        """Plan if due (or, with event re-planning, if demand outgrew the plan); next tick."""
        sample_s = self.sim.scenario.control.sample_period_s
        if self.demand.observed_steps(t_s) < 1:
            # Bootstrap: the live planner re-checks on every republish; here every sample.
            return t_s + sample_s
        next_epoch_s = (math.floor(t_s / self.epoch_s) + 1) * self.epoch_s
        event = self.sim.policy.replan == "event" or self.feedback is not None
        self.top_up(t_s)
        due = self.planned_qps is None or t_s % self.epoch_s == 0.0 or self._outgrown(t_s)
        due = self._reprofile_if_drifted(t_s) or due
        if not due and self.feedback is not None:
            due = self._missing(t_s)
        if due:
            try:
                self._plan(t_s)
            except (InfeasiblePlanError, ValueError) as error:  # live keeps the last plan too
                self.solves.append({"t_s": t_s, "status": f"failed: {error}"})
                self.planned_qps = math.inf if self.planned_qps is None else self.planned_qps
        # Pools over shared GPUs: a plan may wait for GPUs (top_up), checked every sample.
        often = event or bool(self.sim.policy.plan_tps) or self.sim.policy.plan_group_pools
        return min(next_epoch_s, t_s + sample_s) if often else next_epoch_s

    def observed_qps(self, t_s: float) -> float:
        """Σ over classes of the last whole step's peak QPS (history ends one lag before now)."""
        peaks = self.history.past_peaks(t_s - self.demand.lag_s, 1)
        return float(sum(v[-1] for v in peaks.values()))

    def _outgrown(self, t_s: float) -> bool:
        if self.sim.policy.replan != "event" or self.planned_qps is None:
            return False
        return self.observed_qps(t_s) > max(self.planned_qps, self.covered_qps or 0.0)

    def _missing(self, t_s: float) -> bool:
        """Pools whose misses say the plan is short: learn their de-rating; re-plan if any."""
        assert self.feedback is not None
        if self.switching:
            return False
        overloaded = self.feedback.overloaded(t_s)
        # Pools absent from the plan in force have no planned capacity: boost only.
        return self.learned.learn(overloaded, self.capacity, t_s, self.step_s)

    def clock_boosted(self, pool_id: str, t_s: float) -> bool:
        """Whether ``pool_id`` missed its SLO within the last step: it runs at the maximum
        clock until then, whatever the plan's cap and MIAD say (capacity comes back at once,
        while a re-plan's instances take their start time)."""
        return self.learned.boosted(pool_id, t_s)

    def pool_derating(self, pid: str) -> float:
        """The capacity share pool ``pid`` is planned at after SLO feedback.

        With whole instances, pools of one mode and class group in other regions are the
        same hardware serving the same mix, so a de-rating learned on one holds for all:
        else the re-plan escapes it by moving the load to an equal pool elsewhere (measured:
        CISO's de-rated long-input TP4 pool moved to PJM's).
        """
        if not self.sim.policy.plan_whole_instances:
            return self.learned.share(pid)
        mode = self._mode[pid]
        return min(self.learned.share(q) for q in self.pools if self._mode[q] == mode)

    def _profiles(self) -> dict[str, tuple[ServingConfig, ...]]:
        out: dict[str, tuple[ServingConfig, ...]] = {}
        for pid, rows in self.profiles.items():
            share = self.pool_derating(pid)
            out[pid] = (
                tuple(dataclasses.replace(r, max_qps=r.max_qps * share) for r in rows)
                if share < 1.0
                else rows
            )
        return out

    def _demand(self, t_s: float) -> dict[tuple[str, str], tuple[float, ...]]:
        keys = [(self.scheme.name, cls) for cls in self.scheme.classes]
        if self.sim.policy.demand_forecast == "live":
            forecast = self.demand.forecast(t_s, keys)
            if self.feedback is None:
                return forecast
            # A miss-triggered plan must cover the load that missed: the trailing step's
            # peaks, which the tracker (whole steps ending one lag ago) may not hold yet.
            seen = self.feedback.peaks(t_s)
            return {
                key: tuple(max(v, seen.get(key[1], 0.0)) for v in series)
                for key, series in forecast.items()
            }
        trended = self.history.forecast(
            t_s - self.demand.lag_s,
            self.demand.observed_steps(t_s),
            self.scheme.classes,
            self.live.recent_steps,
        )
        return {(self.scheme.name, cls): trended[cls] for cls in self.scheme.classes}

    def _alpha(self, t_s: float) -> float:
        """The live α, or (``plan_alpha="forecast-error"``) the goal quantile of the live
        forecast's past realised/forecast ratios, falling back to the live α without any."""
        if self.sim.policy.plan_alpha == "live":
            return self.live.alpha
        steps = self.demand.observed_steps(t_s)
        measured = forecast_error_alpha(
            self.history.past_peaks(t_s - self.demand.lag_s, steps),
            self.live.recent_steps,
            self.sim.policy.scaler.slo_goal,
        )
        return self.live.alpha if measured is None else measured

    def _slo(self) -> SloPolicy:
        slo = slo_policy_for([self.scheme.name])
        margin = self.sim.policy.plan_ttft_margin
        if margin is None:
            return slo
        ttft = {cls: margin * v for cls, v in slo.ttft_ms_by_class.items()}
        return dataclasses.replace(slo, ttft_ms_by_class=ttft)

    def _whole_instances(self) -> dict[str, Any]:
        """``build_live_problem``'s whole-instance inputs (``plan_whole_instances``): each
        pool's idle power, each (region, GPU type)'s GPUs (shared by its TP modes), the node
        size and the bare power of a GPU without a model, as the simulator accounts them."""
        sim = self.sim
        if not sim.policy.plan_whole_instances:
            return {}
        return {
            "instance_idle_w": {
                p.pool_id: mode_idle_w(p.gpu, p.config.tp, p.config.model, p.config.max_num_seqs)
                for p in sim.pools
            },
            "shared_gpus": {
                (r.name, gpu): n for r in sim.scenario.regions for gpu, n in r.gpus.items()
            },
            "node_gpus": sim.scenario.nodes.gpus_per_node,
            "bare_w_per_gpu": {p.gpu: sim.nodes.bare_idle_w(p.gpu) for p in sim.pools},
        }

    def top_up(self, t_s: float) -> None:
        """A plan waiting for GPUs its other TP modes held: start what now fits, and switch
        to it once every planned instance is started (:mod:`loadgen.simulator.mode_switch`)."""
        if self._waiting is None:
            return
        want, switch = self._waiting
        ready_s = start_wanted(self.sim, want, t_s)
        if missing_instances(self.sim, want):
            make_room(self.sim, want)
            self.sim.resteer_orphans(t_s)
            return
        self._waiting = None
        ready_s = max([ready_s, *(i.ready_s for p in self.sim.pools for i in p.live())])
        self.sim.schedule_tick(max(ready_s, t_s), switch)

    def _plan(self, t_s: float) -> None:
        from services.planner.live_plan import build_live_problem

        intensity = self.intensity(t_s)
        problem = build_live_problem(
            pools=self.pools,
            profiles=self._profiles(),
            demand_qps=self._demand(t_s),
            intensity=intensity,
            step_s=self.step_s,
            alpha=self._alpha(t_s),
            slo=self._slo(),
            slices=self.slices,
            class_groups=self.class_groups,
            **self._whole_instances(),
        )
        settings = PlannerSettings(
            objective=self.objective, time_limit_s=self.live.time_limit_s,
            mip_rel_gap=self.sim.policy.plan_mip_rel_gap or self.live.mip_rel_gap,
            primary_slack=self.sim.policy.plan_primary_slack,
        )  # fmt: skip
        epoch = epoch_step.step(problem, settings, self.pools, self.slices, intensity)
        core, decisions, order = epoch.core, epoch.decisions, epoch.fallback_order
        busy = frozenset(p.pool_id for p in self.sim.pools if len(p.queue))
        plan = wire_plan(
            decisions=decisions, pools=self.pools, partition=self.scheme.name,
            epoch=self.epochs, issued_at=t_s, valid_until=t_s + self.epoch_s,
            objective=self.objective.value, status=core.status.value, keep_one=busy,
            fallback_order=order,
        )  # fmt: skip
        self.epochs += 1
        self.solves.append(
            {
                "t_s": t_s,
                "status": core.status.value,
                "peak_demand_qps": sum(max(v) for v in problem.demand_qps.values()),
                "alpha": round(problem.alpha, 4),
                "instances": {p.pool_id: p.instances for p in plan.pools},
                "clock_mhz": {d.pool_id: d.clock_mhz for d in decisions.values()},
                "intensity": {r: v[0] for r, v in intensity.items()},
                "derating": {p: round(d, 4) for p, d in self.learned.derating.items() if d < 1},
                "mix_derating": {
                    p: {f"{c.group}@{c.clock_mhz:g}": round(c.derating, 4) for c in caps}
                    for p, caps in self.mix_capacity.items()
                },
            }
        )
        sized_qps = problem.alpha * sum(max(v) for v in problem.demand_qps.values())
        if not self.gate.admit(core, decisions, problem, intensity, t_s):
            # DynamoLLM's overhead gate keeps the plan in force (loadgen.simulator.gate),
            # which it does only if that plan covers sized_qps: the gate's latest word.
            self.covered_qps = sized_qps
            return
        # Only a plan put in force sets the capacity SLO feedback judges pools against, and
        # the demand the event trigger (_outgrown) compares the observed load with.
        self.planned_qps = self.covered_qps = sized_qps
        self.capacity = {pid: sum(d.capacity_by_class.values()) for pid, d in decisions.items()}
        self._apply(plan, decisions_clock={d.pool_id: d.clock_mhz for d in decisions.values()})

    def _apply(self, plan: WirePlan, decisions_clock: Mapping[str, float | None]) -> None:
        """Start planned instances now; switch routes and drain surplus once they are ready."""
        sim = self.sim
        t_s = sim.now_s
        want = {p.pool_id: p.instances for p in plan.pools}
        ready_s = start_wanted(sim, want, t_s)
        # The router keeps the sim pools' measured no-queue profile (Lat of FREESH Eq. 6), so
        # every policy set is judged against the same per-request E2E bound.
        measured = {p.pool_id: p for p in sim.pools}
        pools = [
            msgspec.structs.replace(
                p,
                ttft_ms=measured[p.pool_id].ttft_s * 1000.0,
                tbt_ms=measured[p.pool_id].tbt_s * 1000.0,
            )
            for p in plan.pools
        ]
        pending = msgspec.structs.replace(plan, pools=pools)
        caps = {pid: c for pid, c in decisions_clock.items() if c is not None}
        # Cold instances take instance_start_s, and a node's boot before it when it was off.
        delay = ready_s - t_s

        def switch(at_s: float) -> bool:
            self.switching = False
            self.plan = pending
            self.clock_caps = caps
            for pool in sim.pools:
                live = pool.live()
                surplus = len(live) - want.get(pool.pool_id, 0)
                for instance in drain_order(live)[: max(0, surplus)]:
                    instance.draining = True
            sim.control.scale_events += 1
            if self.feedback is not None:
                self.feedback.clear()  # judge the new plan on its own completions
            sim.update_routes(at_s)
            sim.resteer_orphans(at_s)
            return False

        if missing_instances(sim, want):
            # TP modes over full GPUs: free them first (mode_switch), switch when started.
            self.switching = True
            self._waiting = (want, switch)
            make_room(sim, want)
            sim.resteer_orphans(t_s)
        elif delay > 0:
            self.switching = True
            sim.schedule_tick(t_s + delay, switch)
        else:
            switch(t_s)
