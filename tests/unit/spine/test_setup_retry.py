"""Start-up set-up that asks JetStream again while its API times out."""

from __future__ import annotations

import nats.errors
import pytest

from shared.bus import retry_on_timeout


async def test_a_timed_out_setup_call_is_asked_again_until_it_is_answered() -> None:
    """Test that two timeouts (a busy server) cost two retries, not the service."""
    calls: list[int] = []

    async def stream_info() -> str:
        calls.append(len(calls))
        if len(calls) <= 2:
            raise nats.errors.TimeoutError
        return "info"

    assert await retry_on_timeout(stream_info, "stream info", within_s=5.0) == "info"
    assert len(calls) == 3


async def test_a_server_that_never_answers_still_fails_the_setup_in_the_end() -> None:
    """Test that the timeout is raised once the retry window has passed, and that other
    errors are not retried at all."""
    calls: list[int] = []

    async def never() -> None:
        calls.append(1)
        raise nats.errors.TimeoutError

    with pytest.raises(nats.errors.TimeoutError):
        await retry_on_timeout(never, "never", within_s=0.5)
    assert 2 <= len(calls) <= 4

    async def refused() -> None:
        calls.append(1)
        raise nats.errors.NoRespondersError

    calls.clear()
    with pytest.raises(nats.errors.NoRespondersError):
        await retry_on_timeout(refused, "refused", within_s=5.0)
    assert calls == [1]
