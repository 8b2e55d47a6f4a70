"""The planner's SLO feedback core: bounded capacity cuts, a floor, clock boosts."""

from __future__ import annotations

import pytest

from services.planner.live_plan import PoolDecision, with_added_instances
from services.planner.slo_feedback import (
    CapacityFeedback,
    FeedbackSettings,
    MissWindow,
    growth_hosts,
)


def test_a_report_cuts_by_at_most_the_step_and_never_below_the_floor() -> None:
    learned = CapacityFeedback(FeedbackSettings(step=0.8, floor=0.3))
    # Missed at a tenth of the planned capacity: the cut is bounded to 0.8 per report.
    assert learned.learn({"a": 1.0}, {"a": 10.0}, t_s=0.0, hold_s=60.0)
    assert learned.share("a") == pytest.approx(0.8)
    for _ in range(20):
        learned.learn({"a": 1.0}, {"a": 10.0}, t_s=0.0, hold_s=60.0)
    assert learned.share("a") == pytest.approx(0.3)
    assert learned.share("b") == 1.0
    learned.reset()
    assert learned.share("a") == 1.0


def test_unbounded_feedback_follows_the_load_it_missed_at() -> None:
    learned = CapacityFeedback(FeedbackSettings(step=None, floor=0.0))
    learned.learn({"a": 2.5}, {"a": 10.0}, t_s=0.0, hold_s=60.0)
    assert learned.share("a") == pytest.approx(0.25)


def test_a_miss_boosts_the_clock_for_the_hold() -> None:
    learned = CapacityFeedback(FeedbackSettings())
    learned.learn({"a": 5.0}, {"a": 10.0}, t_s=100.0, hold_s=60.0)
    assert learned.boosted("a", 159.0)
    assert not learned.boosted("a", 161.0)
    assert not learned.boosted("b", 120.0)


def test_boost_only_feedback_asks_for_no_replan() -> None:
    learned = CapacityFeedback(FeedbackSettings(replan=False))
    assert not learned.learn({"a": 5.0}, {"a": 10.0}, t_s=0.0, hold_s=60.0)
    assert learned.share("a") == 1.0
    assert learned.boosted("a", 30.0)


def test_the_window_reports_a_pool_only_on_significant_misses() -> None:
    window = MissWindow(60.0, goal=0.99, min_requests=20, bin_s=5.0)
    for k in range(100):
        window.add("ok", finish_s=50.0, arrival_s=k * 0.5, request_class="SS", missed=k == 0)
        window.add("bad", finish_s=50.0, arrival_s=k * 0.5, request_class="SS", missed=k < 10)
    report = window.overloaded(55.0)
    assert set(report) == {"bad"}
    assert report["bad"] > 0
    window.clear()
    assert window.overloaded(55.0) == {}


PLANNED = {"a": 0.1}
"""Pool a's planned QPS: below the load of :func:`_window`'s requests (one a second)."""


def _window(misses_after_boost: int, *, since: float = 100.0) -> MissWindow:
    """Before ``since`` every completion missed; from it on ``misses_after_boost`` of 50."""
    window = MissWindow(300.0, goal=0.99, min_requests=20, bin_s=5.0)
    for k in range(50):
        window.add("a", finish_s=since, arrival_s=since - 50 + k, request_class="LS", missed=True)
    for k in range(50):
        late = k < misses_after_boost
        window.add("a", finish_s=since + 60, arrival_s=since + k, request_class="LS", missed=late)
    return window


def test_only_misses_since_the_boost_add_an_instance() -> None:
    learned = CapacityFeedback(FeedbackSettings(replan=False, grow_limit=2))
    learned.learn({"a": 5.0}, {"a": 10.0}, t_s=100.0, hold_s=300.0)
    # Misses before the boost say nothing about the maximum clock.
    assert learned.grow(_window(0), 170.0, {"a": ("a",)}, PLANNED) == []
    assert learned.grow(_window(1), 170.0, {"a": ("a",)}, PLANNED) == []
    assert learned.grow(_window(10), 170.0, {"a": ("a",)}, PLANNED) == [("a", "a")]
    assert learned.extra == {"a": 1}
    assert learned.added == [("a", "a")]


def test_one_call_puts_at_most_one_instance_in_a_host_and_a_withdrawn_one_may_come_again() -> None:
    """Test that two pools short at once whose first host is the same get one instance
    there and the other its next host (or none), since a host listed with room has room for
    one; and that an instance that could not start is forgotten, so a later call retries."""
    window = _window(10)
    for k in range(50):
        window.add("b", finish_s=100.0, arrival_s=50.0 + k, request_class="LS", missed=True)
        window.add("b", finish_s=160.0, arrival_s=100.0 + k, request_class="LS", missed=k < 10)
    learned = CapacityFeedback(FeedbackSettings(replan=False, grow_limit=2))
    learned.learn({"a": 5.0, "b": 5.0}, {"a": 10.0, "b": 10.0}, t_s=100.0, hold_s=300.0)
    planned = PLANNED | {"b": 0.1}
    assert learned.grow(window, 170.0, {"a": ("h",), "b": ("h", "g")}, planned) == [
        ("a", "h"),
        ("b", "g"),
    ]
    learned.withdraw("b", "g")
    assert learned.added == [("a", "h")]
    assert learned.extra == {"a": 1, "b": 0}
    assert learned.grow(window, 171.0, {"a": (), "b": ("h",)}, planned) == [("b", "h")]
    fresh = CapacityFeedback(FeedbackSettings(replan=False, grow_limit=2))
    fresh.learn({"a": 5.0, "b": 5.0}, {"a": 10.0, "b": 10.0}, t_s=100.0, hold_s=300.0)
    assert fresh.grow(window, 170.0, {"a": ("h",), "b": ("h",)}, planned) == [("a", "h")]


def test_a_pool_not_boosted_gets_no_instance() -> None:
    learned = CapacityFeedback(FeedbackSettings(replan=False, grow_limit=2))
    assert learned.grow(_window(50), 170.0, {"a": ("a",)}, PLANNED) == []


def test_growth_waits_for_the_added_instance_and_stops_at_the_limit_or_the_room() -> None:
    learned = CapacityFeedback(FeedbackSettings(replan=False, grow_limit=2))
    learned.learn({"a": 5.0}, {"a": 10.0}, t_s=100.0, hold_s=300.0)
    assert learned.grow(_window(10), 170.0, {"a": ("a",)}, PLANNED) == [("a", "a")]
    learned.started("a", "a", ready_s=200.0, hold_s=300.0)
    # Until it is ready, and then until what arrives after it misses, nothing more.
    assert learned.grow(_window(10), 190.0, {"a": ("a",)}, PLANNED) == []
    assert learned.grow(_window(10), 230.0, {"a": ("a",)}, PLANNED) == []
    assert learned.grow(_window(10, since=200.0), 270.0, {"a": ()}, PLANNED) == []
    assert learned.grow(_window(10, since=200.0), 270.0, {"a": ("a",)}, PLANNED) == [("a", "a")]
    learned.started("a", "a", ready_s=280.0, hold_s=300.0)
    assert learned.boosted("a", 579.0)
    assert learned.grow(_window(10, since=280.0), 350.0, {"a": ("a",)}, PLANNED) == []  # the limit
    learned.new_plan()
    assert learned.extra == {}
    assert learned.grow(_window(10, since=280.0), 350.0, {"a": ("a",)}, PLANNED) == [("a", "a")]


def test_an_added_instance_goes_once_its_pool_meets_the_slo_for_a_hold() -> None:
    learned = CapacityFeedback(FeedbackSettings(replan=False, grow_limit=2))
    learned.learn({"a": 5.0}, {"a": 10.0}, t_s=100.0, hold_s=300.0)
    assert learned.grow(_window(10), 170.0, {"a": ("b",)}, PLANNED) == [("a", "b")]
    learned.started("a", "b", ready_s=200.0, hold_s=300.0)
    assert learned.expire(499.0) == []
    learned.learn({"a": 5.0}, {"a": 10.0}, t_s=450.0, hold_s=300.0)  # missed again
    assert learned.expire(600.0) == []
    assert learned.expire(751.0) == [("a", "b")]
    assert learned.added == []
    assert learned.extra == {"a": 0}


def test_a_pool_missing_within_its_planned_load_gets_no_instance() -> None:
    learned = CapacityFeedback(FeedbackSettings(replan=False, grow_limit=2))
    learned.learn({"a": 5.0}, {"a": 10.0}, t_s=100.0, hold_s=300.0)
    assert learned.grow(_window(10), 170.0, {"a": ("a",)}, {"a": 10.0}) == []
    assert learned.grow(_window(10), 170.0, {"a": ("a",)}, {"a": 0.1}) == [("a", "a")]


def test_growth_is_off_by_default() -> None:
    learned = CapacityFeedback(FeedbackSettings(replan=False))
    learned.learn({"a": 5.0}, {"a": 10.0}, t_s=100.0, hold_s=300.0)
    assert learned.grow(_window(50), 170.0, {"a": ("a",)}, PLANNED) == []


def test_an_instance_goes_to_the_pool_else_to_its_mode_elsewhere_least_carbon_first() -> None:
    modes = {"ciso-long": ("H100", 4, "long"), "pjm-long": ("H100", 4, "long"),
             "bpat-long": ("H100", 4, "long"), "pjm-short": ("H100", 4, "short"),
             "ciso-a100": ("A100", 4, "long")}  # fmt: skip
    room = {"ciso-long": 1, "pjm-long": 2, "bpat-long": 1, "pjm-short": 4, "ciso-a100": 4}
    order = ("bpat-long", "ciso-long", "pjm-long")
    assert growth_hosts("ciso-long", modes, room, order) == ("ciso-long",)
    full = room | {"ciso-long": 0}
    assert growth_hosts("ciso-long", modes, full, order) == ("bpat-long", "pjm-long")
    assert growth_hosts("ciso-long", modes, full | {"bpat-long": 0, "pjm-long": 0}, order) == ()
    assert growth_hosts("unknown", modes, full, order) == ()


def test_an_added_instance_takes_its_share_of_the_short_pools_classes() -> None:
    short = PoolDecision(pool_id="s", instances=2, clock_mhz=1200.0, power_w=800.0,
                         capacity_by_class={"LS": 4.0, "LM": 2.0})  # fmt: skip
    other = PoolDecision(pool_id="o", instances=1, clock_mhz=1200.0, power_w=400.0,
                         capacity_by_class={"LS": 1.0})  # fmt: skip
    grown = with_added_instances({"s": short, "o": other}, [("s", "s"), ("s", "o"), ("s", "n")])
    assert grown["s"].instances == 3
    assert grown["s"].capacity_by_class == {"LS": 6.0, "LM": 3.0}
    assert grown["o"].instances == 2
    assert grown["o"].capacity_by_class == {"LS": 3.0, "LM": 1.0}
    assert grown["o"].power_w == pytest.approx(800.0)
    assert grown["n"].instances == 1
    assert grown["n"].capacity_by_class == {"LS": 2.0, "LM": 1.0}
    assert grown["n"].pool_id == "n"
    # Nothing to copy from a pool the plan gave no instance.
    empty = PoolDecision(pool_id="e", instances=0, clock_mhz=None, power_w=0.0,
                         capacity_by_class={})  # fmt: skip
    assert with_added_instances({"e": empty}, [("e", "e")]) == {"e": empty}


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="step"):
        FeedbackSettings(step=0.0)
    with pytest.raises(ValueError, match="floor"):
        FeedbackSettings(floor=1.5)
    with pytest.raises(ValueError, match="grow"):
        FeedbackSettings(grow_limit=-1)


def test_a_completion_misses_on_ttft_tbt_or_its_e2e_window() -> None:
    from services.planner.slo_feedback import missed_slo
    from shared.domain.classes import ClassSLO

    slo = ClassSLO(ttft_ms=250.0, tbt_ms=50.0)

    def missed(first_s: float = 0.2, last_s: float = 2.2, lat_s: float = 1.0) -> bool:
        return missed_slo(
            arrival_s=0.0, first_s=first_s, last_s=last_s, tokens=51, lat_s=lat_s, slo=slo
        )

    assert not missed()
    assert missed(first_s=0.3, last_s=2.3)  # TTFT 300 ms
    assert missed(last_s=3.2)  # mean TBT 60 ms
    assert missed(lat_s=0.4)  # E2E 2.2 s > 5 x 0.4 s
    no_limits = missed_slo(arrival_s=0.0, first_s=0.2, last_s=2.2, tokens=51, lat_s=0.0, slo=None)
    assert not no_limits
