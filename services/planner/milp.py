"""Solve one epoch: FREESH Eq. 1 with a lexicographic tie-break and feasible fallbacks.

Call :func:`solve_plan`. The order of work:

1. SLO filter (Eq. 1e) on the problem's configurations.
2. Eq. 1 (see :mod:`services.planner.milp_model`) with the primary objective — carbon
   (Σ λ·P·Δt, Eq. 1a) or energy (MinEnergy, λ = 1) — then, if a tie-break is set, a second
   solve that fixes the primary at its optimum (+1e-6 relative, or + ``primary_slack`` of it)
   and optimises the secondary.
   Default (``TieBreak.AUTO``): MinEnergy breaks ties by least carbon; carbon has none, unless
   negative λ is clamped (then least energy, since workers at λ = 0 cost nothing).
3. If Eq. 1 is infeasible: the same model with a shortfall slack per (partition, class);
   stages are least uncovered demand share, then the primary, then the tie-break. The plan is
   flagged ``FALLBACK_SHORTFALL`` and carries the shortfall per class.
4. If the solver returns nothing usable (error, or time limit without incumbent): the greedy
   cover of :mod:`services.planner.fallback`, flagged ``FALLBACK_GREEDY``.

Each solver call gets what is left of ``settings.time_limit_s`` for the whole call.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulp

from services.planner.errors import InfeasiblePlanError
from services.planner.fallback import greedy_plan
from services.planner.milp_model import PlannerModel, build_model
from services.planner.plan_model import Plan, PlanStatus, assemble_plan
from services.planner.problem import Objective, PlannerSettings, Solver, TieBreak
from services.planner.slo_filter import eligible_configs

if TYPE_CHECKING:
    from services.planner.problem import PlanningProblem, ServingConfig

__all__ = ["resolve_tie_break", "solve_plan"]

_MIN_STAGE_S = 0.05
"""Smallest time budget worth giving a solver call; below it the stage is skipped."""


@dataclass(slots=True)
class _Outcome:
    solved: bool
    infeasible: bool
    time_limited: bool
    values: dict[str, float] = field(default_factory=dict)
    solve_s: float = 0.0
    mip_gap: float | None = None
    notes: list[str] = field(default_factory=list)


def resolve_tie_break(settings: PlannerSettings) -> TieBreak:
    """The secondary objective actually used.

    ``AUTO``: least carbon for MinEnergy; for carbon, none, or least energy when λ is clamped.
    """
    tie = settings.tie_break
    if tie is TieBreak.AUTO:
        # Carbon ties are rare (λ differs by region and step), so carbon skips the second solve,
        # except when λ is clamped at 0: workers in such regions are then free and tie.
        if settings.objective is Objective.ENERGY:
            tie = TieBreak.MIN_CARBON
        else:
            tie = TieBreak.NONE if settings.negative_intensity_fill else TieBreak.MIN_ENERGY
    same = (settings.objective is Objective.ENERGY and tie is TieBreak.MIN_ENERGY) or (
        settings.objective is Objective.CARBON and tie is TieBreak.MIN_CARBON
    )
    return TieBreak.NONE if same else tie


def _objectives(model: PlannerModel, settings: PlannerSettings) -> list[pulp.LpAffineExpression]:
    primary = (
        model.carbon_objective_kg if settings.objective is Objective.CARBON else model.energy_wh
    )
    stages = [primary]
    tie = resolve_tie_break(settings)
    if tie is TieBreak.MIN_CARBON:
        stages.append(model.carbon_kg)
    elif tie is TieBreak.MAX_CARBON:
        stages.append(-model.carbon_kg)
    elif tie is TieBreak.MIN_ENERGY:
        stages.append(model.energy_wh)
    return stages


@functools.cache
def _highs_banner_to_stderr() -> None:
    """Make this process's first HiGHS instance with its C stdout pointed at stderr.

    highspy prints a two-line banner on the C library's stdout when the first ``Highs`` of a
    process is made, whatever ``msg`` says, so ``greenserve bench cluster --json`` began with
    it and could not be piped into a JSON reader. Later instances print nothing.
    """
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        highspy.Highs()  # type: ignore[no-untyped-call]
        ctypes.CDLL(None).fflush(None)  # what the banner left in the C buffer goes to stderr
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _make_solver(settings: PlannerSettings, time_limit_s: float) -> pulp.LpSolver:
    if settings.solver is Solver.HIGHS and pulp.HiGHS().available():
        _highs_banner_to_stderr()
        return pulp.HiGHS(msg=False, timeLimit=time_limit_s, gapRel=settings.mip_rel_gap)
    return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, gapRel=settings.mip_rel_gap)


def _has_solution(model: PlannerModel) -> bool:
    lp = model.problem
    if lp.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return False
    if any(v.varValue is None for v in lp.variables()):
        return False
    # HiGHS reports "integer feasible" on a time limit even without an incumbent.
    return bool(lp.valid(eps=1e-5))


def _reported_gap(model: PlannerModel) -> float | None:
    """Relative MIP gap HiGHS proved for the last solve; ``None`` for CBC (pulp hides it)."""
    solver_model = getattr(model.problem, "solverModel", None)
    if solver_model is None:
        return None
    gap = float(solver_model.getInfo().mip_gap)
    return gap if gap == gap and gap != float("inf") else None  # NaN/inf when not a MIP


def _solve_lexicographic(
    model: PlannerModel,
    stages: list[pulp.LpAffineExpression],
    settings: PlannerSettings,
    deadline: float,
    primary: int = 0,
) -> _Outcome:
    """Solve ``stages`` in order, each bounding the next; ``primary`` is the index of the
    stage whose bound gets ``settings.primary_slack``."""
    outcome = _Outcome(solved=False, infeasible=False, time_limited=False)
    if not model.problem.variables():
        # Nothing eligible or nothing in inventory: the rows are constants, and CBC, handed a
        # model without columns, reports no solution where the empty plan is optimal.
        feasible = all(row.valid(eps=1e-9) for row in model.problem.constraints.values())
        outcome.solved, outcome.infeasible = feasible, not feasible
        return outcome
    for index, expr in enumerate(stages):
        budget = deadline - time.perf_counter()
        if budget < _MIN_STAGE_S:
            outcome.notes.append(f"stage {index} skipped: time limit reached")
            outcome.time_limited = True
            break
        model.problem.setObjective(expr)
        started = time.perf_counter()
        model.problem.solve(_make_solver(settings, budget))
        outcome.solve_s += time.perf_counter() - started
        if not _has_solution(model):
            if index == 0:
                outcome.infeasible = model.problem.status == pulp.LpStatusInfeasible
            else:
                outcome.notes.append(f"stage {index} returned no solution; kept stage {index - 1}")
            break
        outcome.solved = True
        if index == 0:
            outcome.mip_gap = _reported_gap(model)
        outcome.values = {v.name: float(v.varValue or 0.0) for v in model.problem.variables()}
        if model.problem.sol_status != pulp.LpSolutionOptimal:
            outcome.time_limited = True
            outcome.notes.append(f"stage {index} stopped at the time limit")
            break
        if index + 1 < len(stages):
            best = float(pulp.value(expr))
            slack = settings.primary_slack if index == primary else 0.0
            allowed = max(1e-6 * max(1.0, abs(best)), slack * abs(best))
            model.problem += expr <= best + allowed, f"lexicographic_{index}"
    return outcome


def _counts(model: PlannerModel, values: dict[str, float]) -> dict[tuple[str, ServingConfig], int]:
    return {key: round(values.get(var.name, 0.0)) for key, var in model.x.items()}


def _chosen_partition(
    model: PlannerModel, problem: PlanningProblem, values: dict[str, float]
) -> str:
    if not model.q:
        return problem.partition_names()[0]
    return max(model.q, key=lambda s: values.get(model.q[s].name, 0.0))


def solve_plan(problem: PlanningProblem, settings: PlannerSettings | None = None) -> Plan:
    """Plan one epoch (FREESH Eq. 1 with DynamoLLM's clock dimension).

    Args:
        problem: regions, configurations, inventory, forecasts for the epoch.
        settings: objective, tie-break, solver and limits; defaults when ``None``.

    Returns:
        The plan; ``plan.status`` says whether it is optimal, time-limited or a fallback.

    Raises:
        InfeasiblePlanError: Eq. 1 is infeasible and ``settings.fallback`` is off.
        ValueError: the problem has no configurations.
    """
    settings = settings or PlannerSettings()
    if not problem.partition_names():
        raise ValueError("the problem has no serving configurations")
    deadline = time.perf_counter() + settings.time_limit_s
    configs, rejected = eligible_configs(problem.configs, problem.slo)
    notes = [f"slo filter removed {len(rejected)} of {len(problem.configs)} configurations"]
    tie = resolve_tie_break(settings).value
    started = time.perf_counter()
    model = build_model(problem, configs, settings)
    stages = _objectives(model, settings)
    build_s = time.perf_counter() - started
    outcome = _solve_lexicographic(model, stages, settings, deadline)
    solver_name = type(_make_solver(settings, 1.0)).__name__
    status = PlanStatus.TIME_LIMIT if outcome.time_limited else PlanStatus.OPTIMAL
    solve_s = outcome.solve_s

    if not outcome.solved and outcome.infeasible:
        if not settings.fallback:
            raise InfeasiblePlanError("demand exceeds what the inventory can serve within SLOs")
        notes.append("eq. 1 infeasible: planned for the least uncovered demand")
        started = time.perf_counter()
        model = build_model(problem, configs, settings, with_shortfall=True)
        assert model.shortfall_share is not None  # built with_shortfall
        stages = [model.shortfall_share, *_objectives(model, settings)]
        build_s += time.perf_counter() - started
        outcome = _solve_lexicographic(model, stages, settings, deadline, primary=1)
        solve_s += outcome.solve_s
        status = PlanStatus.FALLBACK_SHORTFALL

    notes.extend(outcome.notes)
    if outcome.solved:
        return assemble_plan(
            problem,
            _counts(model, outcome.values),
            partition=_chosen_partition(model, problem, outcome.values),
            status=status,
            objective=settings.objective.value,
            tie_break=tie,
            solve_s=solve_s,
            build_s=build_s,
            solver=solver_name,
            mip_gap=outcome.mip_gap,
            notes=tuple(notes),
        )
    if not settings.fallback:
        raise InfeasiblePlanError("the solver returned no plan within the time limit")
    notes.append("solver gave no plan: greedy cover within inventory")
    partition, counts = greedy_plan(problem, configs, settings)
    return assemble_plan(
        problem,
        counts,
        partition=partition,
        status=PlanStatus.FALLBACK_GREEDY,
        objective=settings.objective.value,
        tie_break="none",
        solve_s=solve_s,
        build_s=build_s,
        solver=solver_name,
        notes=tuple(notes),
    )
