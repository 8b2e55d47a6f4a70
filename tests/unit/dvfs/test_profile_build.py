"""DynamoLLM's instance profile, swept on the engine simulator."""

from __future__ import annotations

import itertools
import math

import numpy as np

from services.dvfs.profile_build import ProfileGrid, build_profile_table, profile_clocks
from services.dvfs.profile_policy import ProfilePolicy, ProfilePolicyConfig
from shared.engine import EngineConfig
from shared.engine.hardware import gpu_spec
from shared.engine.profile_sim import SimWindow
from shared.engine.profiler import RequestClass

A100 = gpu_spec("A100-80GB").supported_clocks_mhz


def test_clock_levels_step_200_mhz_down_from_the_top_to_the_lowest_clock() -> None:
    """Test DynamoLLM's 200-MHz levels, snapped to clocks the GPU supports."""
    levels = profile_clocks(A100)
    assert levels[-1] == max(A100)
    assert levels[0] == min(A100)
    assert set(levels) <= set(A100)
    assert all(150.0 <= b - a <= 250.0 for a, b in itertools.pairwise(levels))
    # Levels 1100, 900, 700, 500, 300 snap to the nearest supported clock, once each.
    assert profile_clocks((300.0, 1000.0, 1100.0)) == (300.0, 1000.0, 1100.0)


def test_a_swept_profile_slows_and_saves_power_with_the_clock_and_marks_overload() -> None:
    """Test the sweep: lower clock, longer TBT and less power; an overloaded point is refused."""
    short = RequestClass(partition="t", name="SS", prompt_tokens=(16, 24), output_tokens=(100, 140))
    grid = ProfileGrid(load_shares=(0.1, 1.5), window=SimWindow(window_s=20.0, drain_s=20.0))
    table = build_profile_table(EngineConfig(gpu="A100-80GB", model="llama-3-8b"), short,
                                grid=grid)  # fmt: skip
    assert table.clocks_mhz == profile_clocks(A100)
    light = table.at_load(0.0)  # below the first load: clamped to it
    power, ttft, tbt = light
    assert np.all(np.diff(tbt) < 0)
    assert np.all(np.diff(power) > 0)
    assert np.all(np.isfinite(ttft))
    _, ttft_over, _ = table.at_load(1e9)  # past every load: 1.5 times the bound at max clock
    assert math.isinf(ttft_over[0])  # the lowest clock cannot finish that load
    policy = ProfilePolicy(table, ProfilePolicyConfig(ttft_slo_s=0.3, tbt_slo_s=0.15))
    assert policy.choose_clock(0.0) == min(A100)  # light load: least power at the lowest clock
    assert policy.choose_clock(1e9) > min(A100)
