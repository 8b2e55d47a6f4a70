"""Node-level power accounting (``loadgen.simulator.nodes``): idle GPUs on powered nodes."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.scenario import Scenario
from loadgen.traces import TraceRequest
from shared.engine import EngineConfig, create_engine

MODEL = "llama-3-8b"
INTENSITY = 400.0


def _scenario(gpus: int, **extra: object) -> Scenario:
    raw: dict[str, object] = {
        "name": "nodes",
        "model": MODEL,
        "start_utc": "2022-06-15T00:00:00Z",
        "regions": [{"name": "R", "carbon": "CISO", "gpus": {"H100-80GB": gpus}}],
        "engine": {"max_num_seqs": 8},
        "control": {"sample_period_s": 5.0},
    }
    raw.update(extra)
    return Scenario.model_validate(raw)


def _sim(gpus: int, instances: int, trace: list[TraceRequest]) -> ClusterSimulator:
    """A static single pool of ``instances`` TP1 instances on ``gpus`` GPUs."""
    carbon = CarbonClock({"R": np.full(48, INTENSITY)}, start_offset_s=3600.0)
    policy = policy_by_name("single-pool", tp=1, instances=instances)
    return ClusterSimulator(_scenario(gpus), policy, trace, carbon=carbon)


def _loaded_idle_w() -> float:
    engine = create_engine(EngineConfig(gpu="H100-80GB", model=MODEL))
    return float(engine.idle_power_w)


TRACE = [TraceRequest(0.0, 200, 20), TraceRequest(3.0, 300, 30)]
BARE_SHARE = Scenario.model_fields["nodes"].default.bare_idle_share


def test_an_unused_gpu_on_a_powered_node_draws_bare_idle_power() -> None:
    """Test that 6 GPUs without an instance on a powered 8-GPU node draw bare idle power."""
    result = _sim(8, 2, TRACE).run()
    bare_w = BARE_SHARE * _loaded_idle_w()
    assert result.bare_energy_j == pytest.approx(6 * bare_w * result.sim_s, rel=1e-9)
    assert result.node_hours == pytest.approx(result.sim_s / 3600.0, rel=1e-9)
    assert 0.0 < bare_w < _loaded_idle_w()  # bare is below loaded idle, and not zero


def test_a_powered_off_node_draws_nothing() -> None:
    """Test that a second node that holds no instance adds no energy and no node-time."""
    one_node = _sim(8, 2, TRACE).run()
    two_nodes = _sim(16, 2, TRACE).run()
    assert two_nodes.energy_j == pytest.approx(one_node.energy_j, rel=1e-12)
    assert two_nodes.node_hours == pytest.approx(one_node.node_hours, rel=1e-12)
    assert two_nodes.node_power_ons == 0


def test_energy_is_the_engines_plus_the_bare_gpus_and_co2_prices_all_of_it() -> None:
    """Test energy conservation: every joule is an engine's or a bare GPU's, and is priced."""
    sim = _sim(16, 3, TRACE)
    result = sim.run()
    engines = sum(i.engine.energy_j for i in sim.retired)
    assert result.energy_j == pytest.approx(engines + result.bare_energy_j, rel=1e-12)
    assert result.co2_kg == pytest.approx(result.energy_j / 3.6e6 * INTENSITY / 1000.0)
    # Lower bound: every GPU of the powered node at least at bare idle, the whole run.
    assert result.energy_j > 8 * BARE_SHARE * _loaded_idle_w() * result.sim_s


def test_a_cold_instance_on_a_powered_off_node_waits_for_the_boot() -> None:
    """Test that booting a node delays the instance by node_power_on_s and is counted."""
    sim = _sim(16, 1, TRACE)
    pool = sim.pools[0]
    delays = sim.scenario.delays
    instance = sim.start_instance(pool, 10.0, warm=False)
    assert instance is not None
    assert instance.origin_s == pytest.approx(10.0 + delays.node_power_on_s)
    assert instance.ready_s == pytest.approx(
        10.0 + delays.node_power_on_s + delays.instance_start_s
    )
    assert sim.nodes.power_on_events == [10.0]
    # A second cold instance fits the booting node: no second boot, same wait.
    pool.max_instances = 2
    pool.slots = (*pool.slots, pool.slots[0])
    second = sim.start_instance(pool, 20.0, warm=False)
    assert second is not None
    assert second.node is instance.node
    assert second.ready_s == pytest.approx(instance.ready_s)
    assert sim.nodes.power_on_events == [10.0]


def test_a_booting_node_draws_bare_power_for_every_gpu_then_powers_off_when_empty() -> None:
    """Test the boot's energy (all GPUs bare) and that a node left empty goes off."""
    sim = _sim(8, 1, TRACE)
    instance = sim.start_instance(sim.pools[0], 0.0, warm=False)
    assert instance is not None
    boot_s = sim.scenario.delays.node_power_on_s
    bare, node_s = sim.nodes.account(0.0, boot_s)
    bare_w = BARE_SHARE * _loaded_idle_w()
    assert bare["R"] == pytest.approx(8 * bare_w * boot_s)
    assert node_s == pytest.approx(boot_s)
    sim.retire(instance, boot_s + 5.0)
    bare, _ = sim.nodes.account(boot_s, boot_s + 10.0)
    # 5 s with one GPU held by the instance, 5 s with none, then off.
    assert bare["R"] == pytest.approx((7 * 5.0 + 8 * 5.0) * bare_w)
    assert sim.nodes.powered_count() == 0
    assert sim.nodes.account(boot_s + 10.0, boot_s + 20.0) == ({}, 0.0)


def test_a_held_node_stays_on_while_empty_and_goes_off_once_released() -> None:
    """Test that a node held for a re-shard is not powered off between its layouts."""
    sim = _sim(8, 1, TRACE)
    instance = sim.start_instance(sim.pools[0], 0.0, warm=True)
    assert instance is not None
    node = sim.nodes.nodes[0]
    node.held = True
    sim.retire(instance, 1.0)
    _, node_s = sim.nodes.account(0.0, 5.0)
    assert node.powered
    assert node_s == pytest.approx(5.0)
    node.held = False
    sim.nodes.account(5.0, 10.0)
    assert not node.powered
