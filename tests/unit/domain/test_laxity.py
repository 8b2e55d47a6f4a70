"""FREESH Eq. 6 laxity: one formula for the scheduler, the router and the ladder."""

from __future__ import annotations

from services.scheduler import laxity as scheduler_laxity
from services.scheduler.emergency import (
    EmergencyConfig,
    EmergencyState,
    InstanceView,
    Rung,
    WaitingView,
)
from services.scheduler.emergency import step as ladder_step
from shared.domain.laxity import laxity_s


def test_laxity_is_deadline_minus_now_minus_remaining() -> None:
    """Test ℓ = deadline − t − T_remain, negative once the request can no longer make it."""
    assert laxity_s(10.0, 3.0, 4.0) == 3.0
    assert laxity_s(10.0, 3.0, 8.0) == -1.0


def test_the_schedulers_laxity_is_the_shared_one_with_its_window() -> None:
    """Test that the scheduler's t_arr + W form gives exactly (bit for bit) the shared
    value at deadline t_arr + W, so live and simulated rounds agree."""
    for arrival, window, remaining, now in [
        (0.1, 0.7, 0.3, 0.2),
        (1234.567, 8.9, 3.21, 1240.0),
        (3.0, 1.4 * 2.2, 2.2, 5.5),
    ]:
        assert scheduler_laxity.laxity_s(arrival, window, remaining, now) == laxity_s(
            arrival + window, remaining, now
        )


def test_the_ladder_calls_a_request_at_risk_by_the_shared_laxity() -> None:
    """Test that the ladder leaves NORMAL exactly when some request's laxity falls below
    ``imminent_laxity_s``."""
    config = EmergencyConfig(imminent_laxity_s=0.5)

    def view(now_s: float) -> InstanceView:
        waiting = WaitingView(request_id="r", arrival_s=0.0, deadline_s=10.0, remaining_s=2.0)
        return InstanceView(now_s=now_s, instance_id="i", pool_id="p", requests=[waiting])

    # Laxity 10 − 7.4 − 2 = 0.6: calm; at 7.6 it is 0.4: at risk.
    calm, _ = ladder_step(EmergencyState(), view(7.4), config)
    risk, actions = ladder_step(EmergencyState(), view(7.6), config)
    assert laxity_s(10.0, 2.0, 7.4) > 0.5 > laxity_s(10.0, 2.0, 7.6)
    assert calm.rung is Rung.NORMAL
    assert risk.rung is Rung.REORDER
    assert actions
