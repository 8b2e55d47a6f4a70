"""Tests for the per-step barrier decode simulator (BF-IO seed 003, Sec. 6)."""

from __future__ import annotations

import numpy as np
import pytest

from greenserve.bench.bfio.decode_sim import DecodeSimConfig, PowerModel, StepTimeModel, simulate
from services.router.placement import make_placer

STEP = StepTimeModel(base_s=0.01, per_kv_token_s=1e-6, per_prefill_token_s=1e-5)
POWER = PowerModel(busy_w=300.0, idle_w=60.0)


def _workload(seed: int, size: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    prompts = np.clip(rng.lognormal(6.5, 1.0, size), 1, 8000).astype(np.int64)
    return prompts, rng.geometric(1 / 40, size).astype(np.int64)


def test_one_request_on_one_worker_costs_its_exact_step_times() -> None:
    """Test that a lone request's time, tokens and energy follow the affine step model."""
    config = DecodeSimConfig(workers=1, batch=1, steps=0, reveal_target=1)
    result = simulate(np.array([100]), np.array([3]), make_placer("fcfs-fill"), config, STEP, POWER)
    expected = sum(0.01 + 1e-6 * (100 + k) for k in range(3))
    assert result.tokens == 3
    assert result.time_s == pytest.approx(expected)
    assert result.energy_j == pytest.approx(300.0 * expected)
    assert result.idle_fraction == 0.0


def test_aggregated_mode_charges_prefill_to_the_admitting_worker() -> None:
    """Test that the aggregated mode adds prompt work to the admission step only."""
    prompts, outputs = np.array([1000]), np.array([2])
    base = DecodeSimConfig(workers=1, batch=1, steps=0, reveal_target=1)
    disagg = simulate(prompts, outputs, make_placer("jsq"), base, STEP, POWER)
    agg_config = DecodeSimConfig(workers=1, batch=1, steps=0, reveal_target=1, mode="aggregated")
    agg = simulate(prompts, outputs, make_placer("jsq"), agg_config, STEP, POWER)
    assert agg.time_s - disagg.time_s == pytest.approx(1000 * 1e-5)


def test_barrier_idle_power_is_charged_to_lighter_workers() -> None:
    """Test that a worker waiting at the barrier draws idle power for the wait."""
    config = DecodeSimConfig(workers=2, batch=1, steps=1, reveal_target=2)
    result = simulate(
        np.array([5000, 10]), np.array([1, 1]), make_placer("fcfs-fill"), config, STEP, POWER
    )
    heavy, light = 0.01 + 5e-3, 0.01 + 1e-5
    assert result.energy_j == pytest.approx(300 * (heavy + light) + 60 * (heavy - light))
    assert result.imbalance_sum == pytest.approx(2 * 5000 - 5010)


def test_simulation_is_deterministic_given_a_seed() -> None:
    """Test that two runs with the same workload and seeded placer give identical results."""
    prompts, outputs = _workload(1)
    config = DecodeSimConfig(workers=4, batch=8, steps=150, reveal_target=64)
    first = simulate(prompts, outputs, make_placer("p2c", seed=4), config, STEP, POWER)
    second = simulate(prompts, outputs, make_placer("p2c", seed=4), config, STEP, POWER)
    assert (first.tokens, first.time_s, first.energy_j) == (
        second.tokens,
        second.time_s,
        second.energy_j,
    )


def test_bfio_cuts_barrier_imbalance_against_fcfs_and_round_robin() -> None:
    """Test that BF-IO (H=0) has lower mean Eq. 2 imbalance than FCFS fill and round robin."""
    prompts, outputs = _workload(2)
    config = DecodeSimConfig(workers=4, batch=8, steps=300, warmup_steps=30, reveal_target=64)
    imbalance = {
        name: simulate(prompts, outputs, make_placer(name, **params), config, STEP, POWER)
        for name, params in (("fcfs-fill", {}), ("rr", {}), ("bfio", {"horizon": 0}))
    }
    bfio = imbalance["bfio"].imbalance_sum
    assert bfio < 0.5 * imbalance["fcfs-fill"].imbalance_sum
    assert bfio < 0.5 * imbalance["rr"].imbalance_sum
    assert imbalance["bfio"].idle_fraction < imbalance["fcfs-fill"].idle_fraction


def test_waiting_budget_bounds_the_starvation_of_bfio_admission() -> None:
    """Test that turning a waiting budget into laxity cuts BF-IO's longest pool wait."""
    prompts, outputs = _workload(3, size=6000)
    free_run = DecodeSimConfig(workers=4, batch=8, steps=600, warmup_steps=50, reveal_target=96)
    capped_run = DecodeSimConfig(
        workers=4, batch=8, steps=600, warmup_steps=50, reveal_target=96, max_wait_s=3.0
    )
    uncapped = simulate(prompts, outputs, make_placer("bfio", horizon=0), free_run, STEP, POWER)
    capped = simulate(prompts, outputs, make_placer("bfio", horizon=0), capped_run, STEP, POWER)
    assert max(capped.wait_s) < 0.6 * max(uncapped.wait_s)
