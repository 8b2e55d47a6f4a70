"""The simulator's added instances: SLO feedback gives a pool whose load outgrew its plan,
and that still misses at the maximum clock, one more instance within the epoch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.results import SimResult
from loadgen.simulator.scenario import Scenario
from loadgen.traces import synthetic_trace
from services.planner import slo_feedback


def _burst_run(grow: int) -> SimResult:
    """Two minutes at 0.5 req/s, then two at 30 (one epoch: no planned re-plan)."""
    scenario = Scenario.model_validate(
        {
            "name": "burst",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [{"name": "R", "carbon": "CISO", "gpus": {"H100-80GB": 8}}],
            "engine": {"max_num_seqs": 8},
            "control": {"sample_period_s": 5.0, "epoch_s": 1200.0, "steps_per_epoch": 20},
            "delays": {"instance_start_s": 5.0},
        }
    )
    calm = synthetic_trace(rate_rps=0.5, duration_s=120.0, seed=1, mean_prompt_tokens=300,
                           mean_output_tokens=40)  # fmt: skip
    busy = synthetic_trace(rate_rps=30.0, duration_s=120.0, seed=2, mean_prompt_tokens=300,
                           mean_output_tokens=40)  # fmt: skip
    trace = sorted(
        calm + [dataclasses.replace(r, t_s=r.t_s + 120.0) for r in busy], key=lambda r: r.t_s
    )
    carbon = CarbonClock({"R": np.full(48, 300.0)}, start_offset_s=3600.0)
    policy = policy_by_name("default", tp=1, plan_tps=(), plan_group_pools=False,
                            plan_split_long_input=False, feedback_grow=grow)  # fmt: skip
    sim = ClusterSimulator(
        scenario,
        policy,
        trace,
        carbon=carbon,
        carbon_forecast=lambda region, t_s: carbon.forecast(region, t_s),
    )
    return sim.run()


def test_a_burst_above_the_plan_adds_an_instance_only_when_growth_is_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    added: list[tuple[str, str, float]] = []
    original = slo_feedback.CapacityFeedback.started

    def started(self: slo_feedback.CapacityFeedback, pool: str, host: str, ready_s: float,
                hold_s: float) -> None:  # fmt: skip
        added.append((pool, host, ready_s))
        original(self, pool, host, ready_s, hold_s)

    monkeypatch.setattr(slo_feedback.CapacityFeedback, "started", started)
    off = _burst_run(0)
    assert added == []
    on = _burst_run(1)
    assert len(added) == 1
    pool, host, ready_s = added[0]
    assert pool == host  # the region has room: the pool itself grows
    assert 120.0 < ready_s < 240.0
    assert on.scale_events > off.scale_events
