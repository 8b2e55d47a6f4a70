"""Clock-model shapes the seeds report, and the calibrated error on held-out points."""

from __future__ import annotations

import itertools
import random

import pytest

from shared.engine import EngineConfig, EngineRequest, create_engine
from shared.engine.accuracy import evaluate
from shared.engine.calibration import load_points
from shared.engine.coefficients import load_coefficients
from shared.paths import data_path


def test_supported_clocks_follow_nvml_steps() -> None:
    """Test that A100 clocks run 210-1410 MHz and H100 up to 1980 MHz in 15 MHz steps."""
    a100 = create_engine(EngineConfig(gpu="A100-80GB", model="llama-3-8b"))
    h100 = create_engine(EngineConfig(gpu="H100-80GB", model="llama-3-8b"))
    assert a100.supported_clocks_mhz[0] == 210.0
    assert a100.supported_clocks_mhz[-1] == 1410.0
    assert h100.supported_clocks_mhz[-1] == 1980.0
    clocks = a100.supported_clocks_mhz
    assert {b - a for a, b in itertools.pairwise(clocks)} == {15.0}
    assert a100.set_clock_mhz(1001.0) == 1005.0
    assert a100.set_clock_mhz(5000.0) == 1410.0


def test_decode_is_nearly_insensitive_to_clock_while_prefill_is_clock_bound() -> None:
    """Test that a 25 % lower clock slows decode under 10 % but prefill in proportion."""
    costs = create_engine(EngineConfig(gpu="A100-80GB", model="llama-3-8b")).cost_model
    decode_hi = costs.cost_of(0, 16, 16 * 800, 16 * 800, 16, 1410.0).duration_s
    decode_lo = costs.cost_of(0, 16, 16 * 800, 16 * 800, 16, 1050.0).duration_s
    prefill_hi = costs.cost_of(4096, 0, 4096 * 2048, 4096, 1, 1410.0).duration_s
    prefill_lo = costs.cost_of(4096, 0, 4096 * 2048, 4096, 1, 1050.0).duration_s
    assert decode_lo / decode_hi < 1.10
    assert prefill_lo / prefill_hi > 1.25


def test_energy_per_decoded_token_is_u_shaped_in_clock() -> None:
    """Test that J/token is lowest at an interior clock and >20 % higher at both ends."""
    engine = create_engine(EngineConfig(gpu="A100-80GB", model="llama-3-8b"))
    costs = engine.cost_model
    energy = {}
    for clock in engine.supported_clocks_mhz:
        cost = costs.cost_of(0, 64, 64 * 800, 64 * 800, 64, clock)
        energy[clock] = cost.power_w_per_gpu * cost.duration_s / 64
    best = min(energy, key=energy.__getitem__)
    assert 210.0 < best < 1410.0
    assert energy[210.0] > 1.2 * energy[best]
    assert energy[1410.0] > 1.2 * energy[best]


def test_power_grows_super_linearly_with_clock() -> None:
    """Test that dynamic power at half clock is below half of dynamic power at full clock."""
    engine = create_engine(EngineConfig(gpu="H100-80GB", model="llama-3-8b"))
    costs = engine.cost_model
    idle = engine.idle_power_w

    def dynamic(clock: float) -> float:
        return costs.cost_of(2048, 0, 2048 * 1024, 2048, 1, clock).power_w_per_gpu - idle

    assert dynamic(990.0) < 0.5 * dynamic(1980.0)


def _light_load_run(clock_mhz: float) -> tuple[float, float]:
    engine = create_engine(EngineConfig(gpu="A100-80GB", model="llama-3-8b", clock_mhz=clock_mhz))
    rng = random.Random(3)
    arrivals, now = [], 0.0
    for _ in range(150):
        now += rng.expovariate(1.0)
        arrivals.append(now)
    durations: list[float] = []
    for index, arrival in enumerate(arrivals):
        while engine.has_work and engine.now_s < arrival:
            step = engine.step()
            assert step is not None
            durations.append(step.duration_s)
        engine.idle_until(arrival)
        prompt, output = rng.randint(20, 180), rng.randint(20, 400)
        engine.add(
            EngineRequest(
                request_id=str(index), prompt_tokens=prompt, output_tokens=output, arrival_s=arrival
            )
        )
    while (step := engine.step()) is not None:
        durations.append(step.duration_s)
    durations.sort()
    return engine.energy_j, durations[len(durations) // 2]


def test_low_clock_at_light_load_saves_about_half_the_energy() -> None:
    """Test that the lowest clock keeping median TBT within 2.3x saves 35-75 % (FREESH ~52 %)."""
    base_energy, base_tbt = _light_load_run(1410.0)
    chosen = None
    for clock in (300.0, 450.0, 600.0, 750.0, 900.0):
        energy, tbt = _light_load_run(clock)
        if tbt <= 2.3 * base_tbt:
            chosen = (clock, energy)
            break
    assert chosen is not None
    saving = 1.0 - chosen[1] / base_energy
    assert 0.35 <= saving <= 0.75


def test_held_out_calibration_error_stays_within_stated_bounds() -> None:
    """Test that held-out median errors stay under 15 % (TBT, TTFT, power) and 30 % (J/token)."""
    detail = evaluate(load_points(data_path("calibration")), load_coefficients(), split="test")
    assert detail["tbt"]["median_ape"] <= 15.0
    assert detail["ttft"]["median_ape"] <= 15.0
    assert detail["power"]["median_ape"] <= 15.0
    assert detail["j_per_token"]["median_ape"] <= 30.0
    assert detail["vidur_layer"]["median_ape"] <= 10.0


@pytest.mark.parametrize("model", ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b",
                                   "llama-3-70b"])  # fmt: skip
@pytest.mark.parametrize("gpu", ["A100-80GB", "H100-80GB"])
def test_every_required_model_runs_on_every_gpu_at_some_tp(model: str, gpu: str) -> None:
    """Test that each required model fits at TP 8 and serves a request with finite cost."""
    engine = create_engine(EngineConfig(gpu=gpu, model=model, tp=8))
    engine.add(EngineRequest(request_id="x", prompt_tokens=512, output_tokens=4))
    while (step := engine.step()) is not None:
        assert 0.0 < step.duration_s < 5.0
        assert 0.0 < step.power_w <= 8 * 700.0


def test_active_power_is_paid_while_kernels_run_not_in_host_gaps() -> None:
    """Test that the clock-independent active power is paid for the kernel share of an
    iteration only: under a stack with long host gaps it adds less than its full value, and
    more at a lower clock, whose longer kernels fill more of the iteration."""
    from dataclasses import replace

    from shared.engine.clock import DEFAULT_CLOCK_SETTINGS
    from shared.engine.coefficients import for_stack
    from shared.engine.costs import CostModel
    from shared.engine.hardware import gpu_spec, model_shape

    gpu, model = gpu_spec("H100-80GB"), model_shape("llama-2-70b")
    coeff = for_stack(load_coefficients(), "H100-80GB", "splitwise")
    active = DEFAULT_CLOCK_SETTINGS.active_power_tdp_fraction * gpu.tdp_w
    assert active > 0.0
    with_active = CostModel(gpu, model, 8, coeff)
    without = CostModel(gpu, model, 8, coeff, replace(DEFAULT_CLOCK_SETTINGS,
                                                      active_power_tdp_fraction=0.0))  # fmt: skip

    def added_w(clock: float) -> float:
        args = (0, 16, 16 * 600.0, 16 * 600.0, 16, clock)
        return with_active.cost_of(*args).power_w_per_gpu - without.cost_of(*args).power_w_per_gpu

    assert 0.3 * active < added_w(1980.0) < 0.9 * active  # splitwise's host gaps are long
    assert added_w(795.0) > added_w(1980.0) + 0.05 * active
