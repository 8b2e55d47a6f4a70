"""DynamoLLM's profile policy: filter clocks by SLO at the load, then least energy."""

from __future__ import annotations

import pytest

from services.dvfs.controller import LatencyWindow, Observation
from services.dvfs.profile_policy import (
    ProfilePoint,
    ProfilePolicy,
    ProfilePolicyConfig,
    ProfileTable,
)

A100 = tuple(210.0 + 15.0 * i for i in range(81))
# (clock, energy, TTFT, TBT) at load 2 rps, then at 8 rps. Energy is U-shaped in clock, as
# in DynamoLLM Table I: the slowest clock is not the cheapest.
PROFILE = {
    2.0: [(810.0, 60.0, 0.20, 0.06), (1110.0, 50.0, 0.12, 0.04), (1410.0, 70.0, 0.08, 0.03)],
    8.0: [(810.0, 90.0, 0.90, 0.20), (1110.0, 80.0, 0.35, 0.09), (1410.0, 95.0, 0.20, 0.05)],
}


def _table() -> ProfileTable:
    return ProfileTable(
        [
            ProfilePoint(load_rps=load, clock_mhz=c, energy_j=e, ttft_s=ttft, tbt_s=tbt)
            for load, rows in PROFILE.items()
            for c, e, ttft, tbt in rows
        ]
    )


def _policy(ttft: float = 0.3, tbt: float = 0.1) -> ProfilePolicy:
    return ProfilePolicy(_table(), ProfilePolicyConfig(ttft_slo_s=ttft, tbt_slo_s=tbt))


def test_least_energy_clock_is_chosen_among_those_meeting_the_slo() -> None:
    """Test that at light load the energy-optimal middle clock wins."""
    assert _policy().choose_clock(2.0) == 1110.0


def test_clocks_that_break_the_slo_are_filtered_out_even_if_cheaper() -> None:
    """Test that at heavy load the cheaper 1110 MHz is dropped for its 350 ms TTFT."""
    assert _policy().choose_clock(8.0) == 1410.0


def test_tighter_slo_moves_the_choice_up() -> None:
    """Test that a 100 ms TTFT target excludes 1110 MHz at light load."""
    assert _policy(ttft=0.1).choose_clock(2.0) == 1410.0


def test_no_feasible_clock_falls_back_to_the_highest() -> None:
    """Test that when nothing meets the SLO the highest profiled clock is the best effort."""
    assert _policy(ttft=0.01).choose_clock(8.0) == 1410.0


def test_loads_between_profile_points_are_interpolated() -> None:
    """Test that at 5 rps the rows are the mean of the 2 and 8 rps rows."""
    energy, ttft, tbt = _table().at_load(5.0)
    assert energy.tolist() == pytest.approx([75.0, 65.0, 82.5])
    assert ttft.tolist() == pytest.approx([0.55, 0.235, 0.14])
    assert tbt.tolist() == pytest.approx([0.13, 0.065, 0.04])


def test_decide_uses_the_observed_arrival_rate_and_snaps() -> None:
    """Test that decide() looks up the last period's load and returns a supported clock."""
    policy = _policy()
    light = Observation(
        now_s=0.0, clock_mhz=1410.0, supported_clocks_mhz=A100, arrival_rate_rps=1.0
    )
    heavy = Observation(
        now_s=0.0, clock_mhz=1410.0, supported_clocks_mhz=A100, arrival_rate_rps=9.0
    )
    assert policy.decide(light) == 1110.0
    assert policy.decide(heavy) == 1410.0
    assert policy.period_s == 5.0


def test_incomplete_profile_grid_is_rejected() -> None:
    """Test that a profile missing a (load, clock) cell cannot be built."""
    points = [
        ProfilePoint(load_rps=1.0, clock_mhz=810.0, energy_j=1.0, ttft_s=0.1, tbt_s=0.1),
        ProfilePoint(load_rps=2.0, clock_mhz=1410.0, energy_j=1.0, ttft_s=0.1, tbt_s=0.1),
    ]
    with pytest.raises(ValueError, match="every load"):
        ProfileTable(points)


def test_an_e2e_bound_drops_clocks_the_published_policy_would_keep() -> None:
    """Test GreenServe's E2E bound: the cheapest clock is refused when its E2E is too long."""
    points = [
        ProfilePoint(load_rps=load, clock_mhz=c, energy_j=e, ttft_s=0.1, tbt_s=0.03, e2e_s=e2e)
        for load in (1.0, 4.0)
        for c, e, e2e in ((810.0, 40.0, 9.0), (1110.0, 55.0, 6.0), (1410.0, 70.0, 4.5))
    ]
    table = ProfileTable(points)
    published = ProfilePolicyConfig(ttft_slo_s=0.3, tbt_slo_s=0.15)
    assert ProfilePolicy(table, published).choose_clock(2.0) == 810.0
    bounded = ProfilePolicyConfig(ttft_slo_s=0.3, tbt_slo_s=0.15, e2e_slo_s=7.0)
    assert ProfilePolicy(table, bounded).choose_clock(2.0) == 1110.0
    assert table.e2e_at_load(2.0).tolist() == [9.0, 6.0, 4.5]
    tight = ProfilePolicyConfig(ttft_slo_s=0.3, tbt_slo_s=0.15, e2e_slo_s=1.0)
    assert ProfilePolicy(table, tight).choose_clock(2.0) == 1410.0  # none meets it: best effort


def test_a_request_near_its_bound_raises_an_emergency_to_the_maximum_clock() -> None:
    """Test DynamoLLM's emergency step 2: a sample over the share of a bound → max clock."""
    config = ProfilePolicyConfig(ttft_slo_s=0.3, tbt_slo_s=0.1, e2e_slo_s=10.0, emergency_share=0.8)
    policy = ProfilePolicy(_table(), config)
    calm = LatencyWindow(ttft_s=(0.2,), tbt_s=(0.07,), e2e_s=(7.9,))
    observation = Observation(
        now_s=0.0,
        clock_mhz=1110.0,
        supported_clocks_mhz=A100,
        arrival_rate_rps=2.0,
        latencies={"SS": calm},
    )
    assert policy.decide(observation) == 1110.0
    for late in (
        LatencyWindow(ttft_s=(0.25,)),
        LatencyWindow(tbt_s=(0.085,)),
        LatencyWindow(e2e_s=(8.5,)),
    ):
        urgent = Observation(
            now_s=0.0,
            clock_mhz=1110.0,
            supported_clocks_mhz=A100,
            arrival_rate_rps=2.0,
            latencies={"SS": calm, "LL": late},
        )
        assert policy.emergency(urgent)
        assert policy.decide(urgent) == max(A100)
    assert not _policy().emergency(urgent)  # no share set: the published default
