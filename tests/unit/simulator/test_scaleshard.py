"""DynamoLLM's ScaleShard baseline in the simulator (``loadgen.simulator.scaleshard``)."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.gate import instance_idle_w
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.scaleshard import ShardManager, ShardSettings
from loadgen.simulator.scenario import Scenario
from loadgen.simulator.shard_layout import (
    LoadCurve,
    NodeOption,
    choose_layout,
    measured_curve,
    reshard_delay_s,
    tau_s,
)
from loadgen.traces import TraceRequest
from shared.engine import EngineConfig
from shared.engine.coefficients import load_coefficients
from shared.engine.hardware import model_shape

PERIOD_S = 30.0
HIGH_FROM_S = 90.0


def test_reshard_delays_are_table_vi_in_units_of_tau_plus_engine_sync() -> None:
    """Test Table VI's homogeneous entries and τ from the engine's GPU-to-GPU rate."""
    tau, sync = 0.05, 2.0
    assert reshard_delay_s(8, 8, tau, sync) == 0.0
    assert reshard_delay_s(8, 4, tau, sync) == pytest.approx(tau + sync)
    assert reshard_delay_s(8, 2, tau, sync) == pytest.approx(tau + sync)
    assert reshard_delay_s(4, 2, tau, sync) == pytest.approx(tau + sync)
    assert reshard_delay_s(4, 8, tau, sync) == pytest.approx(sync)
    assert reshard_delay_s(2, 8, tau, sync) == pytest.approx(sync)
    assert reshard_delay_s(2, 4, tau, sync) == pytest.approx(sync)
    rate = load_coefficients().gpus["H100-80GB"].allreduce_bytes_per_s["2"]
    tau_70b = tau_s("llama-3-70b", "H100-80GB")
    assert tau_70b == pytest.approx(model_shape("llama-3-70b").weight_bytes / 8 / rate)
    assert 0.01 < tau_70b < 0.1  # the seed's τ ≈ 50 ms for 1/8 of a 70B model


def _curve(idle_w: float, per_instance_qps: float, joules_per_query: float) -> LoadCurve:
    """Linear from idle to L̄ (made-up points: the policy itself uses measured curves)."""
    return LoadCurve(
        max_qps=per_instance_qps,
        qps=(0.0, per_instance_qps),
        power_w=(idle_w, idle_w + joules_per_query * per_instance_qps),
    )


def _option(tp: int, per_instance_qps: float, joules_per_query: float) -> NodeOption:
    curve = _curve(75.0 * tp, per_instance_qps, joules_per_query)
    return NodeOption(tp=tp, instances=8 // tp, curve=curve)


# Larger TP: fewer joules per query but less capacity per node (made-up profile points).
OPTIONS = {8: _option(8, 1.0, 100.0), 4: _option(4, 1.5, 120.0), 2: _option(2, 2.5, 150.0)}


def test_the_layout_is_the_lowest_power_that_covers_alpha_times_the_load() -> None:
    """Test the pool-level choice: cheapest covering layout, else the largest capacity."""
    one = [OPTIONS]
    assert choose_layout(one, [8], 0.5, 1.1) == (8,)
    assert choose_layout(one, [8], 2.0, 1.1) == (4,)  # TP8 covers 1.0 < 2.2
    assert choose_layout(one, [8], 5.0, 1.1) == (2,)
    assert choose_layout(one, [4], 50.0, 1.1) == (2,)  # nothing covers: most capacity
    assert choose_layout(one, [4], 0.0, 1.1) == (4,)  # idle: every layout equal, no change
    # Two nodes at 4 QPS: TP8+TP8 covers 2 < 4.4; 2TP4 twice (6 QPS) draws the least.
    assert choose_layout([OPTIONS, OPTIONS], [8, 8], 4.0, 1.1) == (4, 4)
    # 2.5 QPS: one node changes (the one already at TP4 keeps it), the other stays at TP8.
    assert choose_layout([OPTIONS, OPTIONS], [8, 4], 2.5, 1.1) == (8, 4)


def _fake_profile(gpu: str, tp: int, request_class: str) -> LoadCurve:
    """OPTIONS' curves on the 8B engine's real idle power."""
    idle = instance_idle_w(EngineConfig(gpu=gpu, model="llama-3-8b", tp=tp, max_num_seqs=8))
    per_instance, joules = {8: (1.0, 100.0), 4: (1.5, 120.0), 2: (2.5, 150.0)}[tp]
    return _curve(idle, per_instance, joules)


def _run(
    policy: str, burst: list[TraceRequest] | None = None, chunk_tokens: int = 8192
) -> ClusterSimulator:
    """Two 8-GPU nodes, one class (SS): 0.2 QPS until 90 s, then 4 QPS until 180 s."""
    scenario = Scenario.model_validate(
        {
            "name": "shard",
            "model": "llama-3-8b",
            "start_utc": "2022-06-15T00:00:00Z",
            "regions": [{"name": "R", "carbon": "CISO", "gpus": {"H100-80GB": 16}}],
            "engine": {"max_num_seqs": 8, "max_num_batched_tokens": chunk_tokens},
            "control": {"sample_period_s": 5.0, "scale_period_s": PERIOD_S},
        }
    )
    low = [TraceRequest(t_s=5.0 * k, prompt_tokens=100, output_tokens=50) for k in range(18)]
    high = [
        TraceRequest(t_s=HIGH_FROM_S + 0.25 * k, prompt_tokens=100, output_tokens=50)
        for k in range(360)
    ]
    trace = sorted(low + high + (burst or []), key=lambda r: r.t_s)
    carbon = CarbonClock({"R": np.full(48, 300.0)}, start_offset_s=3600.0)
    sim = ClusterSimulator(scenario, policy_by_name(policy), trace, carbon=carbon)
    if policy == "scale-shard":
        built = sim.control.planner
        assert isinstance(built, ShardManager)
        sim.control.planner = ShardManager(built.view, built.actions, profile=_fake_profile)
    sim.run()
    return sim


def test_nodes_reshard_when_the_load_rises_and_wait_out_the_delay_losing_nothing() -> None:
    """Test re-shard with load, the delay in virtual time, no request lost, same completions."""
    sim = _run("scale-shard")
    manager = sim.control.planner
    assert isinstance(manager, ShardManager)
    reshards = manager.reshards
    # Low load keeps TP8 (fewest joules per query); 4 QPS needs 2TP4 on both nodes, one
    # node at a time (staggered), decided at the first period that saw the high load.
    assert [(r["from_tp"], r["to_tp"]) for r in reshards] == [(8, 4), (8, 4)]
    assert reshards[0]["begin_s"] == HIGH_FROM_S + PERIOD_S
    assert reshards[1]["begin_s"] == pytest.approx(reshards[0]["ready_s"])
    sync = ShardSettings().sync_s
    expected = reshard_delay_s(8, 4, tau_s("llama-3-8b", "H100-80GB"), sync)
    for record in reshards:
        assert record["delay_s"] == pytest.approx(expected)
        assert record["ready_s"] - record["drained_s"] == pytest.approx(expected)
        assert record["drained_s"] >= record["begin_s"]
        node = record["node"]
        for state in sim.states:
            instance = state.instance
            assert instance is not None
            if instance.instance_id == node:  # the node's TP8 instance
                assert state.placed_s <= record["begin_s"]
            elif instance.instance_id.startswith(f"{node}.tp4."):  # its new TP4 instances
                assert state.placed_s >= record["ready_s"]
                assert state.first_s > record["ready_s"]
    started = sorted(i.instance_id for i in sim.retired if ".tp4." in i.instance_id)
    assert len(started) == 4, "each node became two TP4 instances"
    served = {s.instance.instance_id for s in sim.states if s.instance is not None}
    assert served & set(started), "the new instances served"
    # Nothing lost: every request completes with its exact token count, as under MultiPool.
    baseline = _run("multi-pool")
    assert not any(s.rejected for s in sim.states)
    assert [(s.request_id, s.tokens) for s in sim.states] == [
        (s.request_id, s.tokens) for s in baseline.states
    ]
    assert all(s.tokens == s.output for s in sim.states)
    # The re-sharded GPUs are never counted twice.
    assert sim.control.gpu_seconds <= 16 * sim.control.end_s + 1e-6
    # A re-shard keeps its server on (no boot), and each TP4 pair shares its old node.
    assert sim.nodes.power_on_events == []
    assert sim.control.node_seconds == pytest.approx(2 * sim.control.end_s)
    pairs = {i.node for i in sim.retired if ".tp4." in i.instance_id}
    assert len(pairs) == 2


def test_requests_without_a_first_token_are_requeued_and_the_others_drain() -> None:
    """Test the re-shard's hand-over: a node caught mid-prefill (16-token chunks) gives its
    not-yet-started requests back to the pool queue; every request still completes."""
    begin_s = HIGH_FROM_S + PERIOD_S
    burst = [TraceRequest(t_s=begin_s - 0.5, prompt_tokens=250, output_tokens=50)] * 16
    sim = _run("scale-shard", burst=burst, chunk_tokens=16)
    manager = sim.control.planner
    assert isinstance(manager, ShardManager)
    assert manager.reshards[0]["begin_s"] == begin_s
    assert sum(r["requeued"] for r in manager.reshards) >= 1
    assert not any(s.rejected for s in sim.states)
    assert all(s.tokens == s.output for s in sim.states)
    for record in manager.reshards:
        for state in sim.states:
            if state.instance is not None and state.instance.instance_id == record["node"]:
                assert state.first_s <= record["begin_s"], "it should have been re-queued"


def test_a_concave_load_curve_keeps_the_large_tp_that_a_linear_one_would_split() -> None:
    """Test that the layout follows the curve's shape, not only its end points."""
    linear = {8: _option(8, 4.0, 100.0), 4: _option(4, 3.0, 90.0)}
    assert choose_layout([linear], [8], 0.4, 1.1) == (4,)  # fewer joules per query at L̄
    # Same end points, but each TP4 instance draws most of its power already at low load (as
    # the engine measures: two instances iterate where one would).
    tp4 = linear[4].curve
    concave = LoadCurve(
        max_qps=tp4.max_qps,
        qps=(0.0, 0.5, tp4.max_qps),
        power_w=(tp4.power_w[0], tp4.power_w[0] + 0.8 * (tp4.power_w[1] - tp4.power_w[0]),
                 tp4.power_w[1]),
    )  # fmt: skip
    bent = {8: linear[8], 4: NodeOption(tp=4, instances=2, curve=concave)}
    assert choose_layout([bent], [8], 0.4, 1.1) == (8,)


def test_measured_curves_run_from_idle_to_the_live_profile_row() -> None:
    """Test that the default curve is the engine's idle power, then measured points, then the
    live planner's (L̄, P̃) row."""
    from services.planner.live_profiles import ProfileRequest, measure_mode_profiles

    request = ProfileRequest(
        gpu="H100-80GB", tp=4, model="llama-3-8b", scheme="dynamollm9", clock_fractions=(1.0,),
        window_s=30.0, max_num_seqs=8,
    )  # fmt: skip
    curve = measured_curve(request, "SS", ShardSettings().load_fractions)
    assert curve is not None
    row = next(r for r in measure_mode_profiles(request) if r.request_class == "SS")
    assert curve.max_qps == row.max_qps
    assert curve.power_w[-1] == row.power_w
    assert curve.power_w[0] == instance_idle_w(
        EngineConfig(gpu="H100-80GB", model="llama-3-8b", tp=4, max_num_seqs=8)
    )
    assert list(curve.qps) == sorted(curve.qps)
    assert len(curve.qps) == len(ShardSettings().load_fractions) + 2
    assert all(curve.power_w[0] < p for p in curve.power_w[1:])
