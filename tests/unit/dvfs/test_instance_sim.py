"""The discrete instance loop: every request completes, policies see their window."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.instance_sim import Arrival, run_instance
from services.dvfs.controller import FixedClockController, Observation, RequestState
from services.dvfs.miad import MiadController
from shared.engine import EngineConfig, create_engine


def _arrivals(seconds: float, rate: float, seed: int = 0) -> list[Arrival]:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rate, size=int(seconds * rate)))
    return [
        Arrival(request_id=f"r{i}", arrival_s=float(t), prompt_tokens=15,
                output_tokens=int(rng.integers(40, 200)), e2e_slo_s=7.0)
        for i, t in enumerate(times)
    ]  # fmt: skip


class Recorder:
    """A fixed-clock policy that keeps what it was shown."""

    period_s = 1.0

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def decide(self, observation: Observation) -> float:
        """Record the observation and hold the maximum clock."""
        self.seen.append(observation)
        return observation.max_clock_mhz


def test_every_request_completes_with_its_true_length(engine_config: EngineConfig) -> None:
    """Test that the loop drains the workload and records first token and finish."""
    arrivals = _arrivals(30.0, 3.0)
    run = run_instance(create_engine(engine_config), arrivals, FixedClockController())
    columns = run.columns
    assert columns.completed.all()
    assert columns.output_tokens.tolist() == [a.output_tokens for a in arrivals]
    assert np.all(columns.first_token_s > columns.arrival_s)
    assert np.all(columns.finish_s >= columns.first_token_s)
    assert run.mean_clock_mhz == pytest.approx(1410.0)
    assert run.energy_j > 0.0


def test_policy_sees_latencies_requests_and_load_each_period(engine_config: EngineConfig) -> None:
    """Test that observations carry the window's samples and the requests' deadlines."""
    recorder = Recorder()
    run_instance(create_engine(engine_config), _arrivals(10.0, 4.0), recorder)
    assert len(recorder.seen) >= 10
    busy = [o for o in recorder.seen if o.requests]
    assert busy
    assert any(o.latencies.get("SS") and o.latencies["SS"].tbt_s for o in recorder.seen)
    assert any(o.arrival_rate_rps > 0 for o in recorder.seen)
    first = busy[0].requests[0]
    assert first.deadline_s > busy[0].now_s - 7.0
    assert all(r.predicted_remaining_tokens >= 1 for o in busy for r in o.requests)


def test_miad_saves_energy_at_light_load(engine_config: EngineConfig) -> None:
    """Test that MIAD uses less energy than max clock on a light SS workload."""
    arrivals = _arrivals(60.0, 2.0)
    fixed = run_instance(create_engine(engine_config), arrivals, FixedClockController())
    miad = run_instance(create_engine(engine_config), arrivals, MiadController())
    assert miad.energy_j < 0.8 * fixed.energy_j
    assert miad.mean_clock_mhz < fixed.mean_clock_mhz
    assert miad.columns.completed.all()


def test_an_admission_gate_holds_arrivals_and_their_wait_counts(
    engine_config: EngineConfig,
) -> None:
    """Test that a gate admitting one request at a time serialises them, FIFO, none lost."""
    arrivals = _arrivals(5.0, 4.0)
    shown: list[int] = []

    def one_at_a_time(observation: Observation, candidate: RequestState) -> bool:
        shown.append(len(observation.requests))
        assert candidate.generated_tokens == 0
        return not observation.requests

    gated = run_instance(
        create_engine(engine_config), arrivals, FixedClockController(), admission=one_at_a_time
    ).columns
    free = run_instance(create_engine(engine_config), arrivals, FixedClockController()).columns
    assert gated.completed.all()
    assert max(shown) >= 1  # the gate was asked while a request ran, and refused
    assert np.all(np.diff(gated.first_token_s) > 0)  # FIFO, one at a time
    assert np.all(gated.first_token_s[1:] >= gated.finish_s[:-1])
    assert float(np.mean(gated.finish_s - gated.arrival_s)) > float(
        np.mean(free.finish_s - free.arrival_s)
    )
