"""MIAD dynamics (FREESH Eq. 5a/5b) and its congestion test against Table 7."""

from __future__ import annotations

from services.dvfs.controller import LatencyWindow, Observation
from services.dvfs.miad import FREESH_TABLE7, MiadConfig, MiadController, is_congested

A100 = tuple(210.0 + 15.0 * i for i in range(81))
CONGESTED = {"SS": LatencyWindow(tbt_s=(0.02, 0.2))}
CALM = {"SS": LatencyWindow(tbt_s=(0.02, 0.03), ttft_s=(0.05,), e2e_s=(2.0,))}


def _observe(clock: float, latencies: dict[str, LatencyWindow], waiting: int = 0) -> Observation:
    return Observation(
        now_s=0.0,
        clock_mhz=clock,
        supported_clocks_mhz=A100,
        latencies=latencies,
        num_waiting=waiting,
    )


def _trajectory(
    controller: MiadController, start: float, latencies: dict[str, LatencyWindow], steps: int
) -> list[float]:
    clocks, clock = [start], start
    for _ in range(steps):
        clock = controller.decide(_observe(clock, latencies))
        clocks.append(clock)
    return clocks


def test_congestion_climbs_from_300_to_max_in_three_periods() -> None:
    """Test that ×2 on congestion goes 300 → 600 → 1200 → 1410 MHz (FREESH §2.3)."""
    assert _trajectory(MiadController(), 300.0, CONGESTED, 3) == [300.0, 600.0, 1200.0, 1410.0]


def test_calm_periods_fall_back_to_the_floor_in_about_eleven_seconds() -> None:
    """Test that −100 MHz per period needs 11 periods to 310 MHz and one more to 300."""
    path = _trajectory(MiadController(), 1410.0, CALM, 12)
    assert path[1] == 1305.0  # 1310 snapped to the 15 MHz grid
    assert path[10] == 405.0  # 410 snapped: ten steps of exactly 100 MHz, no drift
    assert path[11] == 315.0  # 310 snapped, still above the floor after 11 s
    assert path[12] == 300.0
    assert path == sorted(path, reverse=True)


def test_decrease_steps_are_not_eaten_by_snapping() -> None:
    """Test that ten calm periods lower the clock by 1000 MHz within one grid step."""
    path = _trajectory(MiadController(), 1410.0, CALM, 10)
    assert abs((path[0] - path[10]) - 1000.0) <= 7.5


def test_controller_resynchronises_when_another_actor_moves_the_clock() -> None:
    """Test that after an external change MIAD continues from the observed clock."""
    controller = MiadController()
    controller.decide(_observe(1410.0, CALM))
    assert controller.decide(_observe(600.0, CONGESTED)) == 1200.0


def test_aggregation_changes_what_counts_as_congestion() -> None:
    """Test that one slow request trips "max" but not "p50"."""
    window = {"SS": LatencyWindow(ttft_s=(0.05, 0.06, 0.07, 0.5))}
    assert is_congested(window, FREESH_TABLE7, aggregation="max")
    assert not is_congested(window, FREESH_TABLE7, aggregation="p50")


def test_thresholds_depend_on_request_type() -> None:
    """Test that a 500 ms TTFT congests SS (300 ms) but not LS (600 ms), per Table 7."""
    assert is_congested({"SS": LatencyWindow(ttft_s=(0.5,))}, FREESH_TABLE7)
    assert not is_congested({"LS": LatencyWindow(ttft_s=(0.5,))}, FREESH_TABLE7)
    assert is_congested({"SS": LatencyWindow(e2e_s=(7.5,))}, FREESH_TABLE7)
    assert not is_congested({"SL": LatencyWindow(e2e_s=(7.5,))}, FREESH_TABLE7)


def test_queue_counts_as_congestion_only_when_enabled() -> None:
    """Test that a waiting queue raises the clock only with queue_triggers."""
    plain = MiadController().decide(_observe(600.0, {}, waiting=3))
    queued = MiadController(MiadConfig(queue_triggers=True)).decide(_observe(600.0, {}, waiting=3))
    assert plain == 495.0
    assert queued == 1200.0


def test_max_clock_setting_caps_the_increase() -> None:
    """Test that a configured f_max below the GPU's maximum bounds Eq. 5a."""
    controller = MiadController(MiadConfig(max_clock_mhz=1000.0))
    assert controller.decide(_observe(900.0, CONGESTED)) == 990.0  # 1000 is off-grid: round down


def test_clamping_to_an_off_grid_ceiling_is_not_mistaken_for_an_external_move() -> None:
    """Test that Eq. 5b steps down from the unsnapped f_max after MIAD itself clamped there.

    With f_max = 1000 MHz (off the 15 MHz grid) the applied clock is 990; the controller
    must not read its own rounding as another actor moving the clock, so calm periods go
    1000 → 900 → 800 → 700 (snapped: 900, 795, 705), not 990 → 890 → … (FREESH Eq. 5b).
    """
    controller = MiadController(MiadConfig(max_clock_mhz=1000.0))
    clock = controller.decide(_observe(1410.0, CONGESTED))
    assert clock == 990.0
    path = _trajectory(controller, clock, CALM, 3)
    assert path == [990.0, 900.0, 795.0, 705.0]


def test_hold_when_idle_keeps_the_clock_only_without_any_evidence() -> None:
    """Test that with ``hold_when_idle`` a period with nothing running, waiting or measured
    keeps the clock, where plain Eq. 5b lowers it by δ; that a period with requests running
    or latency samples (but no congestion) still lowers it; and that the product's MIAD
    (``slo_miad_config``) holds by default while FREESH's own does not."""
    from services.dvfs.slo_miad import slo_miad_config
    from shared.domain.classes import default_slos, dynamollm_scheme

    idle = _observe(1410.0, {})
    holding = MiadController(MiadConfig(hold_when_idle=True))
    assert holding.decide(idle) == 1410.0
    assert MiadController(MiadConfig()).decide(idle) == 1305.0
    running = Observation(now_s=0.0, clock_mhz=1410.0, supported_clocks_mhz=A100, num_running=3)
    assert MiadController(MiadConfig(hold_when_idle=True)).decide(running) == 1305.0
    quiet = _observe(1410.0, {"SS": LatencyWindow(ttft_s=(0.01,), tbt_s=(0.01,), e2e_s=(0.5,))})
    assert MiadController(MiadConfig(hold_when_idle=True)).decide(quiet) == 1305.0
    slos = default_slos(dynamollm_scheme())
    product = slo_miad_config(slos, guard=0.5, floor_mhz=300.0, period_s=1.0)
    assert product.hold_when_idle
    assert not slo_miad_config(
        slos, guard=0.5, floor_mhz=300.0, period_s=1.0, hold_when_idle=False
    ).hold_when_idle
