"""Clock snapping and the observation contract."""

from __future__ import annotations

import pytest

from services.dvfs.controller import (
    FixedClockController,
    Observation,
    snap_clock,
    snap_clock_down,
    snap_clock_up,
)

A100 = tuple(210.0 + 15.0 * i for i in range(81))


def test_snap_clock_picks_the_nearest_supported_step() -> None:
    """Test that a clock between two steps snaps to the nearer one and ties go up."""
    assert snap_clock(1310.0, A100) == 1305.0
    assert snap_clock(1313.0, A100) == 1320.0
    assert snap_clock(1312.5, A100) == 1320.0


def test_snap_clock_clamps_to_the_supported_range() -> None:
    """Test that clocks outside the range snap to the lowest or highest step."""
    assert snap_clock(50.0, A100) == 210.0
    assert snap_clock(5000.0, A100) == 1410.0


def test_snap_up_and_down_never_cross_the_wanted_clock() -> None:
    """Test that snapping up returns a clock >= the target and snapping down one <= it."""
    assert snap_clock_up(1301.0, A100) == 1305.0
    assert snap_clock_down(1301.0, A100) == 1290.0
    assert snap_clock_up(1305.0, A100) == 1305.0
    assert snap_clock_down(100.0, A100) == 210.0
    assert snap_clock_up(2000.0, A100) == 1410.0


def test_observation_rejects_unsorted_or_empty_clock_lists() -> None:
    """Test that an observation refuses clock lists a policy could not search."""
    with pytest.raises(ValueError, match="ascending"):
        Observation(now_s=0.0, clock_mhz=1410.0, supported_clocks_mhz=(1410.0, 210.0))
    with pytest.raises(ValueError, match="empty"):
        Observation(now_s=0.0, clock_mhz=1410.0, supported_clocks_mhz=())


def test_fixed_controller_holds_max_or_the_snapped_setting() -> None:
    """Test that the baseline returns the GPU's maximum, or its fixed clock snapped."""
    observation = Observation(now_s=0.0, clock_mhz=900.0, supported_clocks_mhz=A100)
    assert FixedClockController().decide(observation) == 1410.0
    assert FixedClockController(clock_mhz=1000.0).decide(observation) == 1005.0
