"""Simulated completions fed to the planner's SLO feedback (``services.planner.slo_feedback``).

The judging and the capacity it learns are the planner's own core; this module only says,
for a simulated request, whether it met its class SLO (TTFT, TBT, and E2E ≤ 5·Lat), as the
live planner does for a ``request.done`` completion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.planner.slo_feedback import MissWindow, missed_slo

if TYPE_CHECKING:
    from loadgen.simulator.cluster_view import ClusterView
    from loadgen.simulator.instance import RequestState

__all__ = ["SloFeedback"]


class SloFeedback(MissWindow):
    """A :class:`MissWindow` over one simulation's pools."""

    def __init__(
        self,
        cluster: ClusterView,
        window_s: float,
        bin_s: float = 5.0,
        *,
        coincident: bool = False,
    ) -> None:
        """Judge ``cluster``'s pools over the last ``window_s`` at its scaler's SLO goal."""
        super().__init__(
            window_s,
            goal=cluster.policy.scaler.slo_goal,
            min_requests=cluster.policy.scaler.min_window_requests,
            bin_s=bin_s,
            coincident=coincident,
        )
        self._slos = cluster.slos

    def add_state(self, state: RequestState) -> None:
        """A completion: did it meet its class SLO (TTFT, TBT, and E2E ≤ 5·Lat)?"""
        missed = missed_slo(
            arrival_s=state.arrival_s,
            first_s=state.first_s,
            last_s=state.last_s,
            tokens=state.tokens,
            lat_s=state.lat_s,
            slo=self._slos.get(state.request_class),
        )
        self.add(
            state.pool,
            finish_s=state.last_s,
            arrival_s=state.arrival_s,
            request_class=state.request_class,
            missed=missed,
        )
