"""The headline policy is the live planner's defaults, read through the same settings."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.simulator.policies import (
    ABLATIONS,
    DEFAULT_SET,
    POLICY_SETS,
    PROFILE_PERCENTILE,
    policy_from_settings,
)
from loadgen.simulator.policy_names import ABLATION_LEVERS, CLI_POLICY_NAMES
from shared.config import Settings


def test_the_default_set_is_the_live_settings() -> None:
    """Test that the bench's headline set is built from ``Settings()`` and follows it."""
    assert POLICY_SETS[DEFAULT_SET] == policy_from_settings(Settings())
    live = Settings().planner
    default = POLICY_SETS[DEFAULT_SET]
    assert default.predictor == Settings().classifier.predictor != "oracle"
    assert default.discipline == Settings().scheduler.discipline
    assert default.plan_slices == live.time_share_slices
    assert default.plan_primary_slack == live.primary_slack
    assert default.feedback_step == live.feedback_step
    assert default.plan_observed_sizes is live.observed_profiles
    assert default.plan_mix_goal == PROFILE_PERCENTILE
    assert default.worker_admission is Settings().worker.admission is False
    changed = Settings(
        planner={"objective": "carbon", "mixed_capacity": False, "slo_feedback": False,
                 "class_groups": "none", "whole_instances": False},
        scheduler={"discipline": "fcfs"},
        worker={"admission": True},
    )  # fmt: skip
    other = policy_from_settings(changed)
    assert (other.objective, other.plan_mix_goal, other.slo_feedback) == ("carbon", None, False)
    assert (other.plan_split_long_input, other.plan_tps, other.discipline) == (False, (), "fcfs")
    assert other.worker_admission


def test_the_headline_places_and_clocks_as_the_live_router_and_dvfs_agent() -> None:
    """Test that the router's placer and the dvfs agent's MIAD settings reach the headline,
    and that a clock mode the simulator cannot mirror is refused, not silently replaced."""
    default = policy_from_settings(Settings())
    assert default.placer == Settings().router.placer
    assert (default.clock, default.miad_guard, default.miad_slo_floor) == ("miad", 0.5, True)
    other = policy_from_settings(
        Settings(router={"placer": "bfio"}, dvfs={"miad_guard": 0.8, "miad_slo_floor": False})
    )
    assert (other.placer, other.miad_guard, other.miad_slo_floor) == ("bfio", 0.8, False)
    assert policy_from_settings(Settings(dvfs={"mode": "fixed"})).clock == "max"
    with pytest.raises(ValueError, match="no simulator counterpart"):
        policy_from_settings(Settings(dvfs={"mode": "fixed", "clock_mhz": 900.0}))


def test_each_ablation_switches_off_one_lever() -> None:
    """Test that every ablation differs from the default in one lever's fields only."""
    default = POLICY_SETS[DEFAULT_SET]
    lever_fields = {
        "no-scale-down": {"scaling", "plan_tps", "plan_group_pools", "plan_split_long_input",
                          "plan_whole_instances"},
        "max-clock": {"clock"},
        "tp8-only": {"tp", "plan_tps"},
        "no-shift": {"plan_primary_slack"},
        "fcfs": {"discipline"},
        "bfio": {"placer"},
        "no-guards": {"plan_observed_sizes", "feedback_step", "feedback_floor",
                      "feedback_boost", "feedback_replan", "feedback_grow"},
        "oracle-lengths": {"predictor"},
    }  # fmt: skip
    assert set(ABLATIONS) == {f"{DEFAULT_SET}-{k}" for k in lever_fields}
    assert set(CLI_POLICY_NAMES) <= set(POLICY_SETS)
    assert {f"{DEFAULT_SET}-{k}" for k in ABLATION_LEVERS} <= set(POLICY_SETS)
    for lever, allowed in lever_fields.items():
        ablation = POLICY_SETS[f"{DEFAULT_SET}-{lever}"]
        changed = {
            f.name
            for f in dataclasses.fields(ablation)
            if f.name not in ("name", "description")
            and getattr(ablation, f.name) != getattr(default, f.name)
        }
        assert changed, lever
        assert changed <= allowed, (lever, changed)
