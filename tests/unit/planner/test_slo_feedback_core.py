"""The planner's SLO feedback core: bounded capacity cuts, a floor, clock boosts."""

from __future__ import annotations

import pytest

from services.planner.slo_feedback import CapacityFeedback, FeedbackSettings, MissWindow


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


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="step"):
        FeedbackSettings(step=0.0)
    with pytest.raises(ValueError, match="floor"):
        FeedbackSettings(floor=1.5)


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
