"""How ``greenserve bench control-plane`` reads its goal off a sweep."""

from __future__ import annotations

from typing import Any

from greenserve.bench.control_plane.run import _goal_met


def _step(rps: float, p99_ms: float, completed: bool = True) -> dict[str, Any]:
    return {
        "offered_rps": rps,
        "achieved_rps": rps,
        "requests": 100,
        "completed": 100 if completed else 99,
        "p99_added_ms": p99_ms,
    }


def _run(*steps: dict[str, Any]) -> dict[str, Any]:
    good = [s["offered_rps"] for s in steps if s["completed"] == s["requests"]]
    return {"steps": list(steps), "good_steps": good}


def test_a_higher_step_with_a_longer_tail_does_not_hide_a_met_goal() -> None:
    run = _run(_step(1000, 2.0), _step(2030, 4.5), _step(3000, 9.0))
    assert _goal_met(run, 2000.0, 5.0)


def test_the_goal_needs_the_rate_and_the_tail_at_the_same_step() -> None:
    assert not _goal_met(_run(_step(1990, 3.0), _step(2030, 5.5)), 2000.0, 5.0)


def test_a_step_that_lost_requests_does_not_meet_the_goal() -> None:
    assert not _goal_met(_run(_step(2030, 3.0, completed=False)), 2000.0, 5.0)
