"""Errors of the planner cores."""

from __future__ import annotations

__all__ = ["InfeasiblePlanError", "PlannerError"]


class PlannerError(Exception):
    """Base class of every planner error."""


class InfeasiblePlanError(PlannerError):
    """Eq. 1 has no feasible plan and the fallback is switched off."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"no feasible epoch plan: {reason}")
        self.reason = reason
