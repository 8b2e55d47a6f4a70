"""The simulator's model of the live worker's admission gate (``PolicySet.worker_admission``)."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.simulator import sim_admission
from loadgen.simulator.results import SimResult
from services.worker.admission_gate import judge
from tests.unit.simulator.two_phase import two_phase_run


def _run(**changes: Any) -> SimResult:
    """Two H100s, Llama-3-8B at 8 sequences each: 20 s calm, then 30 s at 40 req/s."""
    return two_phase_run(
        "single-pool",
        gpus=2,
        control={"sample_period_s": 5.0},
        calm=(1.0, 20.0),
        busy=(40.0, 30.0),
        **changes,
    )


def test_the_gate_refuses_under_load_holds_the_request_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that with the gate on, placements that would break a held request's deadline are
    refused (the live gate's pure check decides) and every request still completes; with it
    off the check never runs."""
    verdicts: list[bool] = []

    def counted(*args: Any) -> Any:
        decision = judge(*args)
        verdicts.append(decision.admitted)
        return decision

    monkeypatch.setattr(sim_admission, "judge", counted)
    off = _run()
    assert verdicts == []
    on = _run(worker_admission=True, admission_deadline_lat=1.4)
    assert verdicts.count(False) > 0
    assert verdicts.count(True) > 0
    assert on.completed == on.requests - on.rejected == off.completed
    # Refused requests wait in the queue instead of joining a full batch: first tokens come
    # later on average, and no request is dropped for it.
    assert on.summary.overall.ttft.mean > off.summary.overall.ttft.mean
