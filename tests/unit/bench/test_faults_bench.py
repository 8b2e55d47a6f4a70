"""The faults bench's report keeps every run of a repeated scenario."""

from __future__ import annotations

from greenserve.bench.faults.run import _by_name
from greenserve.faults import ScenarioResult


def _result(scenario: str, lost: int) -> ScenarioResult:
    return ScenarioResult(scenario, 10, 10 - lost, 0, lost, 0, 1.0, {})


def test_a_repeated_scenario_is_reported_once_per_run() -> None:
    """Test that the second and third runs of a scenario get their own keys, in order."""
    runs = [_result("restart:nats", 0), _result("kill:router", 0), _result("restart:nats", 1)]
    runs.append(_result("restart:nats", 2))
    named = _by_name(runs)
    assert list(named) == ["restart:nats", "kill:router", "restart:nats#2", "restart:nats#3"]
    assert [named[k]["lost"] for k in ("restart:nats", "restart:nats#2", "restart:nats#3")] == [
        0,
        1,
        2,
    ]
