"""The epoch planner's profile rows: each pool's mode measured once per process, scaled by
its mixed-class capacity (``plan_mix_goal``) and by what SLO feedback learned.

:class:`PlanProfiles` is a base of :class:`loadgen.simulator.planned.EpochPlanner`, which
builds the state declared here in its ``__init__``; the methods (re-)measure the rows, on
the reference lengths or the served ones once they drift (``plan_observed_sizes``), and
de-rate them for the MILP.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from services.planner.live_profiles import (
    ProfileRequest,
    measure_mode_profiles,
    reference_lengths,
)
from services.planner.mixed_profiles import (
    MixedCapacity,
    MixedLoad,
    MixRequest,
    derate_rows,
    trace_mix,
)
from shared.domain.classes import scheme_by_name
from shared.domain.observed_mix import profile_lengths

if TYPE_CHECKING:
    from loadgen.simulator.cluster_view import PlannerView
    from services.planner.live_inputs import LivePool
    from services.planner.problem import ServingConfig
    from services.planner.slo_feedback import CapacityFeedback
    from shared.config import PlannerSettings as LivePlannerSettings
    from shared.domain.classes import ClassScheme
    from shared.domain.observed_mix import ObservedMix

__all__ = ["PlanProfiles", "mixed_mode_profiles", "mode_profiles"]


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


class PlanProfiles:
    """The epoch planner's profile rows (a base of ``EpochPlanner``)."""

    view: PlannerView
    live: LivePlannerSettings
    scheme: ClassScheme
    pools: dict[str, LivePool]
    class_groups: dict[str, str]
    observed: ObservedMix | None
    profiled_on: tuple[tuple[int, int], ...]
    reprofiles: list[float]
    profiles: dict[str, tuple[ServingConfig, ...]]
    mix_capacity: dict[str, tuple[MixedCapacity, ...]]
    learned: CapacityFeedback
    _mode: dict[str, tuple[str, int, str | None]]

    def _measure_profiles(self, observed: tuple[tuple[int, int], ...] | None) -> None:
        """Profile every pool's mode (and its mixed-class capacity) on the reference lengths,
        or on ``observed`` ones (the reference's kept for buckets they leave sparse)."""
        view = self.view
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
                max_num_seqs=view.max_num_seqs,
                prompts=prompts,
                outputs=outputs,
            )
            for pid, pool in self.pools.items()
        }
        goal = view.policy.plan_mix_goal
        groups = tuple(sorted(self.class_groups.items()))
        if goal is None:
            self.profiles = {pid: mode_profiles(r) for pid, r in requests.items()}
        else:
            mixed = {pid: mixed_mode_profiles(r, goal, groups, mix) for pid, r in requests.items()}
            self.profiles = {pid: rows for pid, (rows, _) in mixed.items()}
            self.mix_capacity = {pid: caps for pid, (_, caps) in mixed.items()}
        for p in view.pools:
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

    def pool_derating(self, pid: str) -> float:
        """The capacity share pool ``pid`` is planned at after SLO feedback.

        With whole instances, pools of one mode and class group in other regions are the
        same hardware serving the same mix, so a de-rating learned on one holds for all:
        else the re-plan escapes it by moving the load to an equal pool elsewhere (measured:
        CISO's de-rated long-input TP4 pool moved to PJM's).
        """
        if not self.view.policy.plan_whole_instances:
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
