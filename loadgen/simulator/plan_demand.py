"""The epoch planner's demand: completions in, the per-class forecast, α and the re-plan
triggers (event re-planning, SLO feedback) out.

:class:`PlanDemand` is a base of :class:`loadgen.simulator.planned.EpochPlanner`, which
builds the state declared here in its ``__init__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.simulator.demand import forecast_error_alpha

if TYPE_CHECKING:
    from loadgen.simulator.cluster_view import PlannerView
    from loadgen.simulator.demand import ArrivalHistory
    from loadgen.simulator.feedback import SloFeedback
    from loadgen.simulator.instance import RequestState
    from services.planner.live_inputs import DemandTracker
    from services.planner.slo_feedback import CapacityFeedback
    from shared.config import PlannerSettings as LivePlannerSettings
    from shared.domain.classes import ClassScheme
    from shared.domain.observed_mix import ObservedMix

__all__ = ["PlanDemand"]


class PlanDemand:
    """The epoch planner's demand side (a base of ``EpochPlanner``)."""

    view: PlannerView
    live: LivePlannerSettings
    scheme: ClassScheme
    step_s: float
    demand: DemandTracker
    history: ArrivalHistory
    observed: ObservedMix | None
    feedback: SloFeedback | None
    learned: CapacityFeedback
    capacity: dict[str, float]
    planned_qps: float | None
    covered_qps: float | None
    switching: bool

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

    def observed_qps(self, t_s: float) -> float:
        """Σ over classes of the last whole step's peak QPS (history ends one lag before now)."""
        peaks = self.history.past_peaks(t_s - self.demand.lag_s, 1)
        return float(sum(v[-1] for v in peaks.values()))

    def _outgrown(self, t_s: float) -> bool:
        if self.view.policy.replan != "event" or self.planned_qps is None:
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

    def _demand(self, t_s: float) -> dict[tuple[str, str], tuple[float, ...]]:
        keys = [(self.scheme.name, cls) for cls in self.scheme.classes]
        if self.view.policy.demand_forecast == "live":
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
        if self.view.policy.plan_alpha == "live":
            return self.live.alpha
        steps = self.demand.observed_steps(t_s)
        measured = forecast_error_alpha(
            self.history.past_peaks(t_s - self.demand.lag_s, steps),
            self.live.recent_steps,
            self.view.policy.scaler.slo_goal,
        )
        return self.live.alpha if measured is None else measured
