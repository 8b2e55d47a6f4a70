"""A small one-region simulation whose load steps up once: calm, then busy."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.results import SimResult
from loadgen.simulator.scenario import Scenario
from loadgen.traces import synthetic_trace


def two_phase_run(
    policy: str,
    *,
    gpus: int,
    control: dict[str, float],
    calm: tuple[float, float],
    busy: tuple[float, float],
    **changes: Any,
) -> SimResult:
    """Run ``policy`` (with ``changes``) on ``gpus`` H100s of one region (Llama-3-8B, 8
    sequences per instance, 5-s instance start): ``calm`` = (req/s, seconds), then ``busy``
    likewise, 300-token prompts and 40-token outputs, at a flat intensity."""
    scenario = Scenario.model_validate(
        {
            "name": "two-phase",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [{"name": "R", "carbon": "CISO", "gpus": {"H100-80GB": gpus}}],
            "engine": {"max_num_seqs": 8},
            "control": control,
            "delays": {"instance_start_s": 5.0},
        }
    )
    first = synthetic_trace(rate_rps=calm[0], duration_s=calm[1], seed=1,
                            mean_prompt_tokens=300, mean_output_tokens=40)  # fmt: skip
    second = synthetic_trace(rate_rps=busy[0], duration_s=busy[1], seed=2,
                             mean_prompt_tokens=300, mean_output_tokens=40)  # fmt: skip
    trace = sorted(
        first + [dataclasses.replace(r, t_s=r.t_s + calm[1]) for r in second],
        key=lambda r: r.t_s,
    )
    carbon = CarbonClock({"R": np.full(48, 300.0)}, start_offset_s=3600.0)
    return ClusterSimulator(
        scenario,
        policy_by_name(policy, tp=1, **changes),
        trace,
        carbon=carbon,
        carbon_forecast=lambda region, t_s: carbon.forecast(region, t_s),
    ).run()
