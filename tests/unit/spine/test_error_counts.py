"""``reply_error`` counts a failure in ``greenserve_errors_total``, and a cancel nowhere."""

from __future__ import annotations

from typing import cast

from nats.aio.client import Client

from proto.subjects import Subjects
from shared.cancels import CANCELLED_CODE
from shared.counters import ERRORS
from shared.replies import reply_error

SERVICE = "test-replies"


class _Recorder:
    """A NATS client that keeps what is published."""

    def __init__(self) -> None:
        self.published: list[str] = []

    async def publish(self, subject: str, _payload: bytes) -> None:
        self.published.append(subject)


def _count(code: str) -> float:
    value: float = ERRORS.labels(SERVICE, code)._value.get()
    return value


async def test_a_cancelled_request_is_answered_but_not_counted_as_an_error() -> None:
    """Test that ending a request with ``cancelled`` sends the reply without adding to the
    error counter (the dashboard's error ratio counted every cancel), while another code
    still counts once."""
    nc = _Recorder()
    subjects = Subjects("t")
    before = (_count(CANCELLED_CODE), _count("timeout"))
    client = cast(Client, nc)
    await reply_error(
        client, subjects, service=SERVICE, code=CANCELLED_CODE, reason="gone", reply_subject="r.1"
    )
    await reply_error(
        client, subjects, service=SERVICE, code="timeout", reason="late", reply_subject="r.2"
    )
    assert nc.published == ["r.1", "r.2"]
    assert (_count(CANCELLED_CODE), _count("timeout")) == (before[0], before[1] + 1)
