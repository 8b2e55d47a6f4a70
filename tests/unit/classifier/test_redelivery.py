"""The redelivery policy of a failed hand-off: a doubling wait to a ceiling, no cliff."""

from __future__ import annotations

from typing import Any

import pytest

from services.classifier.redelivery import RedeliveryPolicy
from shared.config import ClassifierSettings, NatsSettings, Settings


def test_the_wait_doubles_from_the_first_to_the_ceiling_and_stays_there() -> None:
    """Test that deliveries 1, 2, 3 … wait first, 2×first, … and never above the ceiling,
    however many deliveries a long outage takes."""
    policy = RedeliveryPolicy(first_s=0.5, max_s=5.0, give_up_s=3000.0)
    assert [policy.delay_s(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy.delay_s(10_000) == 5.0


def test_without_a_delivery_limit_only_age_gives_a_message_up() -> None:
    """Test that the default (unlimited deliveries) retries the 21st delivery, where the
    old ``max_deliver`` 20 stopped, and gives up only at ``give_up_s``."""
    policy = RedeliveryPolicy.from_settings(Settings())
    assert policy.max_deliver == -1
    assert not policy.gives_up(21, 10.0)
    assert not policy.gives_up(1_000_000, policy.give_up_s - 1.0)
    assert policy.gives_up(1, policy.give_up_s)


def test_a_finite_delivery_limit_gives_up_on_the_last_delivery() -> None:
    """Test that with ``max_deliver`` set the last delivery is answered, not nak'ed into a
    message JetStream will never deliver again."""
    policy = RedeliveryPolicy(first_s=0.1, max_s=1.0, give_up_s=60.0, max_deliver=3)
    assert not policy.gives_up(2, 0.0)
    assert policy.gives_up(3, 0.0)


@pytest.mark.parametrize(
    "fields",
    [
        {"first_s": 0.0, "max_s": 1.0, "give_up_s": 1.0},
        {"first_s": 2.0, "max_s": 1.0, "give_up_s": 1.0},
        {"first_s": 0.1, "max_s": 1.0, "give_up_s": 0.0},
        {"first_s": 0.1, "max_s": 1.0, "give_up_s": 1.0, "max_deliver": 0},
    ],
)
def test_a_policy_that_cannot_retry_is_refused(fields: dict[str, Any]) -> None:
    """Test that a zero wait, a ceiling below the first wait, no time to retry or a zero
    delivery limit are configuration errors, not silent drops."""
    with pytest.raises(ValueError, match=r"must|need"):
        RedeliveryPolicy(**fields)


def test_the_settings_refuse_a_ceiling_below_the_first_wait_and_zero_deliveries() -> None:
    """Test the settings' own checks of the same limits."""
    with pytest.raises(ValueError, match="handoff_retry_max_s"):
        ClassifierSettings(handoff_retry_first_s=2.0, handoff_retry_max_s=1.0)
    with pytest.raises(ValueError, match="max_deliver"):
        NatsSettings(max_deliver=0)
