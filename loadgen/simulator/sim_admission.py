"""The live worker's admission gate, as the simulator runs it (``PolicySet.worker_admission``).

The decision is the live gate's own pure check (:func:`services.worker.admission_gate.judge`
on :func:`~services.worker.admission_gate.scoreboard_entry` rows and the engine's
:func:`~services.worker.admission_gate.engine_limits`); what this module adds is the
simulator's side of it: the scoreboard built from the instance's requests, and the hold a
refusal puts on the instance (:attr:`SimInstance.gate_until`), which a request ending there
lifts early (the cluster's ``on_finish``).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.simulator.instance import RequestState, SimInstance
from services.worker.admission_gate import engine_limits, judge, scoreboard_entry
from shared.engine import SimulatedEngine

__all__ = ["SimAdmission"]


@dataclass(frozen=True, slots=True)
class SimAdmission:
    """The gate of every simulated instance under one policy."""

    deadline_lat: float
    """Deadline window in units of a request's Lat (the live gate's ``α_LLF`` by default)."""
    hold_s: float
    """How long a refusal keeps the instance closed (``worker.admission_hold_s``)."""

    def admits(self, instance: SimInstance, state: RequestState, t_s: float) -> bool:
        """Whether ``instance`` takes ``state`` at ``t_s``: refused while closed; a refusal
        closes it until a request ends there or the hold passes. An idle instance always
        admits, as live."""
        if instance.gate_until > t_s:
            return False
        if not instance.requests:
            return True
        window = self.deadline_lat
        running = [
            scoreboard_entry(
                s.request_id, s.prompt, s.tokens, s.predicted, s.output,
                s.arrival_s + window * s.lat_s,
            )
            for s in instance.requests.values()
        ]  # fmt: skip
        candidate = scoreboard_entry(
            state.request_id, state.prompt, 0, state.predicted, state.output,
            state.arrival_s + window * state.lat_s,
        )  # fmt: skip
        pending = [s.prompt for s in instance.requests.values() if s.tokens == 0]
        engine = instance.engine
        assert isinstance(engine, SimulatedEngine)  # what create_engine builds
        if judge(running, candidate, pending, engine_limits(engine), t_s).admitted:
            return True
        instance.gate_until = t_s + self.hold_s
        return False
