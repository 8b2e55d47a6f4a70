"""Exact reference for one BF-IO decision: the program (IO) as a MILP, and brute force.

Linearisation (seed 003, Sec. 2.3): binaries ``x_ig`` (admit candidate i on worker g now),
continuous ``M_h >= L_g(h)`` for every worker and step, objective
``sum_h (G * M_h - sum_g L_g(h))`` with ``L_g(h) = base_g(h) + sum_i x_ig (s_i + h)``,
subject to one worker per candidate, ``c_g`` slots per worker, and exactly
``N = min(|W|, sum_g c_g)`` admissions. Solved with CBC through pulp. Only for small
instances: it is the yardstick for :func:`services.router.bfio.balance_future_assign`.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import NDArray

from services.router.lookahead import future_imbalance

__all__ = ["MilpUnavailableError", "allocation_objective", "brute_force_io", "solve_io_milp"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class MilpUnavailableError(RuntimeError):
    """pulp (with its bundled CBC) is not installed."""


def allocation_objective(base: FloatArray, prompts: FloatArray, assign: IntArray) -> float:
    """Return the (IO) objective of an assignment (worker per candidate, -1 = not admitted)."""
    loads = base.astype(np.float64, copy=True)
    drift = np.arange(base.shape[1], dtype=np.float64)
    for i in np.flatnonzero(assign >= 0).tolist():
        loads[int(assign[i])] += prompts[i] + drift
    return future_imbalance(loads)


def solve_io_milp(
    base: FloatArray, free_slots: IntArray, prompts: FloatArray, *, time_limit_s: float = 30.0
) -> tuple[IntArray, float]:
    """Solve (IO) exactly; return (assignment, objective).

    Raises:
        MilpUnavailableError: if pulp is missing.
        RuntimeError: if CBC does not prove optimality within the time limit.
    """
    try:
        import pulp
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise MilpUnavailableError("the BF-IO MILP reference needs pulp (CBC)") from error
    count, width = base.shape
    items = prompts.shape[0]
    admit = min(items, int(np.maximum(free_slots, 0).sum()))
    problem = pulp.LpProblem("bfio_io", pulp.LpMinimize)
    x = {
        (i, g): pulp.LpVariable(f"x_{i}_{g}", cat="Binary")
        for i in range(items)
        for g in range(count)
        if free_slots[g] > 0
    }
    peak = [pulp.LpVariable(f"m_{h}") for h in range(width)]

    def load(g: int, h: int) -> pulp.LpAffineExpression:
        added = [(x[i, g], float(prompts[i] + h)) for i in range(items) if (i, g) in x]
        return pulp.LpAffineExpression(added, constant=float(base[g, h]))

    problem += pulp.lpSum(
        count * peak[h] - pulp.lpSum(load(g, h) for g in range(count)) for h in range(width)
    )
    for h in range(width):
        for g in range(count):
            problem += peak[h] >= load(g, h)
    for i in range(items):
        problem += pulp.lpSum(x[i, g] for g in range(count) if (i, g) in x) <= 1
    for g in range(count):
        if free_slots[g] > 0:
            problem += pulp.lpSum(x[i, g] for i in range(items)) <= int(free_slots[g])
    problem += pulp.lpSum(x.values()) == admit
    status = problem.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s))
    if pulp.LpStatus[status] != "Optimal":
        raise RuntimeError(f"CBC did not prove optimality: {pulp.LpStatus[status]}")
    assign = np.full(items, -1, dtype=np.int64)
    for (i, g), var in x.items():
        if (var.value() or 0.0) > 0.5:
            assign[i] = g
    return assign, allocation_objective(base, prompts, assign)


def brute_force_io(
    base: FloatArray, free_slots: IntArray, prompts: FloatArray
) -> tuple[IntArray, float]:
    """Enumerate every feasible assignment of a tiny instance; return the best and its value."""
    count = base.shape[0]
    items = prompts.shape[0]
    admit = min(items, int(np.maximum(free_slots, 0).sum()))
    best: tuple[IntArray, float] | None = None
    for choice in itertools.product(range(-1, count), repeat=items):
        if sum(1 for g in choice if g >= 0) != admit:
            continue
        if any(choice.count(g) > free_slots[g] for g in range(count)):
            continue
        assign = np.array(choice, dtype=np.int64)
        value = allocation_objective(base, prompts, assign)
        if best is None or value < best[1] - 1e-9:
            best = (assign, value)
    if best is None:
        raise ValueError("no feasible assignment")
    return best
