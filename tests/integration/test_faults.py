"""Fault injection during replays: nothing lost, nothing answered twice, quick recovery."""

from __future__ import annotations

import asyncio

import pytest

from greenserve.faults import run_scenario
from loadgen.traces import load_azure_trace, resolve_trace

pytestmark = pytest.mark.connected


@pytest.mark.parametrize(
    "scenario", ["kill:scheduler", "kill:router", "restart:redis", "drop:worker-0"]
)
async def test_fault_during_replay_loses_and_duplicates_nothing(scenario: str) -> None:
    """Test that the stack recovers from the fault with every request answered exactly once."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=150)
    outcome = await asyncio.to_thread(run_scenario, scenario, trace)
    assert outcome.lost == 0, outcome
    assert outcome.duplicated == 0, outcome
    assert outcome.completed == len(trace), outcome
    assert outcome.recovery_s is not None
    assert outcome.recovery_s < 10.0
