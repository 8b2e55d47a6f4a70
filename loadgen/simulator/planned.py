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
per-pool decisions), and :func:`~services.planner.plan_wire.wire_plan` turn the solution
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

The planner reads the cluster through a :class:`~loadgen.simulator.cluster_view.PlannerView`
and acts on it through :class:`~loadgen.simulator.cluster_view.FleetActions`. This module
builds its state and runs the epoch; its bases hold the rest: profile rows
(:mod:`~loadgen.simulator.plan_profiles`), carbon intensity
(:mod:`~loadgen.simulator.plan_intensity`), demand and re-plan triggers
(:mod:`~loadgen.simulator.plan_demand`), and putting a plan in force
(:mod:`~loadgen.simulator.plan_switch`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from loadgen.simulator.demand import ArrivalHistory
from loadgen.simulator.feedback import SloFeedback
from loadgen.simulator.gate import PlanGate
from loadgen.simulator.plan_demand import PlanDemand
from loadgen.simulator.plan_intensity import PlanIntensity, fitted_forecaster
from loadgen.simulator.plan_profiles import PlanProfiles, mode_profiles
from loadgen.simulator.plan_switch import PlanSwitch
from proto.messages import Plan as WirePlan
from services.planner import epoch_step
from services.planner.errors import InfeasiblePlanError
from services.planner.live_inputs import DemandTracker, LivePool
from services.planner.live_plan import input_groups, with_added_instances
from services.planner.live_profiles import mode_idle_w, reference_lengths, slo_policy_for
from services.planner.mixed_profiles import MixedCapacity
from services.planner.plan_coverage import replan_problem
from services.planner.plan_wire import wire_plan
from services.planner.problem import Objective, PlannerSettings, ServingConfig, SloPolicy
from services.planner.slo_feedback import CapacityFeedback, FeedbackSettings
from shared.config import PlannerSettings as LivePlannerSettings
from shared.domain.classes import scheme_by_name
from shared.domain.load_forecast import LoadForecastConfig
from shared.domain.observed_mix import ObservedMix

if TYPE_CHECKING:
    from loadgen.simulator.cluster_view import FleetActions, PlannerView

__all__ = ["EpochPlanner", "fitted_forecaster", "input_groups", "mode_profiles"]


class EpochPlanner(PlanProfiles, PlanIntensity, PlanDemand, PlanSwitch):
    """Plans one simulation's fleet every epoch and applies the plan to its pools."""

    def __init__(self, view: PlannerView, actions: FleetActions, objective: Objective) -> None:
        """Bind to a simulator's view and actions; profiles and forecasters are prepared here
        (cached)."""
        self.view = view
        self.actions = actions
        self.objective = objective
        self.live = LivePlannerSettings()
        self.slices = view.policy.plan_slices or self.live.time_share_slices
        """Slices per instance (K): a class's capacity in a pool comes in 1/K instances."""
        control = view.scenario.control
        self.epoch_s = control.epoch_s
        self.step_s = control.epoch_s / control.steps_per_epoch
        self.steps = control.steps_per_epoch
        self.scheme = scheme_by_name(view.scenario.slo.scheme)
        bin_s = view.policy.plan_demand_bin_s or self.live.demand_bin_s
        bins = max(1, round(self.step_s / bin_s))
        coincident = view.policy.plan_demand == "coincident"
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
                model=view.scenario.model,
                workers=tuple(f"{p.pool_id}#{k}" for k in range(p.max_instances)),
            )
            for p in view.pools
        }
        self.class_groups = (
            input_groups(self.scheme.classes, self.scheme.labels)
            if view.policy.plan_split_long_input
            else {}
        )
        self.observed = ObservedMix(self.scheme) if view.policy.plan_observed_sizes else None
        """Served request sizes; the planner re-profiles when they drift (observed_mix)."""
        self.profiled_on: tuple[tuple[int, int], ...] = reference_lengths()
        """The lengths the profiles in use were measured on."""
        self.reprofiles: list[float] = []
        self.profiles: dict[str, tuple[ServingConfig, ...]] = {}
        self.mix_capacity: dict[str, tuple[MixedCapacity, ...]] = {}
        self._measure_profiles(None)
        self.feedback = (
            SloFeedback(view, self.step_s, load_config.bin_s, coincident=coincident)
            if view.policy.slo_feedback
            else None
        )
        self.switching = False
        """A plan is waiting for its instances: no feedback until it is in place."""
        self._waiting: tuple[dict[str, int], Callable[[float], bool]] | None = None
        """A plan whose instances wait for GPUs its other TP modes hold: (want, switch)."""
        self._applied = 0
        self._mode = {p.pool_id: (p.gpu, p.config.tp, p.class_group) for p in view.pools}
        """Per pool: (GPU type, TP, class group), what pools in other regions share."""
        self._amend = None
        self._order = ()
        self._added_log = []
        policy = view.policy
        self.learned = CapacityFeedback(
            FeedbackSettings(
                step=policy.feedback_step,
                floor=policy.feedback_floor,
                boost=policy.feedback_boost,
                replan=policy.feedback_replan,
                grow_limit=policy.feedback_grow,
            )
        )
        """Per pool: capacity share learned from observed misses, and clock boosts."""
        self.capacity: dict[str, float] = {}
        """Per pool: the QPS the current plan's slices give it (Σ over classes)."""
        # The energy objective sees λ = 1 (FREESH MinEnergy), unless its tie-break may trade
        # energy for carbon (plan_primary_slack), which needs the forecast intensity.
        self._forecast_intensity = (
            objective == Objective.CARBON or view.policy.plan_primary_slack > 0
        )
        codes = {r.name: r.carbon for r in view.scenario.regions}
        start = pd.Timestamp(view.scenario.start_utc)
        self.start_utc = start
        self.forecasters = (
            {name: fitted_forecaster(code, start) for name, code in codes.items()}
            if self._forecast_intensity and view.carbon_forecast is None
            else {}
        )
        self.codes = codes
        self.plan: WirePlan | None = None
        self.clock_caps: dict[str, float] = {}
        self.epochs = 0
        self.solves: list[dict[str, Any]] = []
        self.gate = PlanGate(self)

    def tick(self, t_s: float) -> float:
        """Plan if due (or, with event re-planning, if demand outgrew the plan); next tick."""
        sample_s = self.view.scenario.control.sample_period_s
        if self.demand.observed_steps(t_s) < 1:
            # Bootstrap: the live planner re-checks on every republish; here every sample.
            return t_s + sample_s
        next_epoch_s = (math.floor(t_s / self.epoch_s) + 1) * self.epoch_s
        event = self.view.policy.replan == "event" or self.feedback is not None
        self.top_up(t_s)
        due = self.planned_qps is None or t_s % self.epoch_s == 0.0 or self._outgrown(t_s)
        due = self._reprofile_if_drifted(t_s) or due
        if not due and self.feedback is not None:
            if not self.switching:
                self.grow(t_s)  # before _missing() extends the boosts it judges
            due = self._missing(t_s)
        if due:
            try:
                self._plan(t_s)
            except (InfeasiblePlanError, ValueError) as error:  # live keeps the last plan too
                self.solves.append({"t_s": t_s, "status": f"failed: {error}"})
                self.planned_qps = math.inf if self.planned_qps is None else self.planned_qps
        # Pools over shared GPUs: a plan may wait for GPUs (top_up), checked every sample.
        often = event or bool(self.view.policy.plan_tps) or self.view.policy.plan_group_pools
        return min(next_epoch_s, t_s + sample_s) if often else next_epoch_s

    def _slo(self) -> SloPolicy:
        slo = slo_policy_for([self.scheme.name])
        margin = self.view.policy.plan_ttft_margin
        if margin is None:
            return slo
        ttft = {cls: margin * v for cls, v in slo.ttft_ms_by_class.items()}
        return dataclasses.replace(slo, ttft_ms_by_class=ttft)

    def _whole_instances(self) -> dict[str, Any]:
        """``build_live_problem``'s whole-instance inputs (``plan_whole_instances``): each
        pool's idle power, each (region, GPU type)'s GPUs (shared by its TP modes), the node
        size and the bare power of a GPU without a model, as the simulator accounts them."""
        view = self.view
        if not view.policy.plan_whole_instances:
            return {}
        return {
            "instance_idle_w": {
                p.pool_id: mode_idle_w(p.gpu, p.config.tp, p.config.model, p.config.max_num_seqs)
                for p in view.pools
            },
            "shared_gpus": {
                (r.name, gpu): n for r in view.scenario.regions for gpu, n in r.gpus.items()
            },
            "node_gpus": view.scenario.nodes.gpus_per_node,
            "bare_w_per_gpu": {p.gpu: view.nodes.bare_idle_w(p.gpu) for p in view.pools},
        }

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
        running = self.gate.running
        covers = True  # nothing runs: no plan to keep, nothing to hold
        if running is not None:
            held = {pid: d.instances for pid, d in running[1].items()}
            # The simulator's re-plans within the epoch are those off its boundary.
            covers, problem = replan_problem(
                problem, running[0].allocations, held, self.slices, running[0].partition,
                within_epoch=t_s % self.epoch_s != 0.0,
            )  # fmt: skip
        settings = PlannerSettings(
            objective=self.objective, time_limit_s=self.live.time_limit_s,
            mip_rel_gap=self.view.policy.plan_mip_rel_gap or self.live.mip_rel_gap,
            primary_slack=self.view.policy.plan_primary_slack,
        )  # fmt: skip
        epoch = epoch_step.step(problem, settings, self.pools, self.slices, intensity)
        core, decisions, order = epoch.core, epoch.decisions, epoch.fallback_order
        busy = frozenset(p.pool_id for p in self.view.pools if len(p.queue))
        wire = functools.partial(
            wire_plan, pools=self.pools, partition=self.scheme.name,
            epoch=self.epochs, issued_at=t_s, valid_until=t_s + self.epoch_s,
            objective=self.objective.value, status=core.status.value, keep_one=busy,
            fallback_order=order,
        )  # fmt: skip
        plan = wire(decisions=decisions)
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
        if not self.gate.admit(core, decisions, intensity, t_s, old_covers=covers):
            # DynamoLLM's overhead gate keeps the plan in force (loadgen.simulator.gate),
            # which it does only if that plan covers sized_qps: the gate's latest word.
            self.covered_qps = sized_qps
            return
        # Only a plan put in force sets the capacity SLO feedback judges pools against, and
        # the demand the event trigger (_outgrown) compares the observed load with.
        self.planned_qps = self.covered_qps = sized_qps
        self.capacity = {pid: sum(d.capacity_by_class.values()) for pid, d in decisions.items()}
        self._apply(
            plan,
            decisions_clock={d.pool_id: d.clock_mhz for d in decisions.values()},
            amend=lambda added: wire(decisions=with_added_instances(decisions, added)),
            order=order,
        )
