"""The NATS connection's log: our own close is not news, a lost server is."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import pytest

from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.servers import ServerProcess, start_nats

pytestmark = pytest.mark.connected


async def test_closing_our_own_connection_logs_no_warning(
    nats_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Test that close() does not log the disconnect warning (``make demo`` printed it)."""
    nc = await connect_nats(NatsSettings(url=nats_server.url), "closing-client")
    with caplog.at_level(logging.DEBUG, logger="shared.bus"):
        await nc.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "nats connection closed" in caplog.text


async def test_losing_the_server_logs_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Test that a server going away is still a warning."""
    server = start_nats(tmp_path)
    try:
        nc = await connect_nats(
            NatsSettings(url=server.url, max_reconnect_attempts=1, reconnect_wait_s=0.1),
            "orphaned-client",
        )
        with caplog.at_level(logging.WARNING, logger="shared.bus"):
            server.kill()
            for _ in range(50):
                if "nats disconnected" in caplog.text:
                    break
                await asyncio.sleep(0.05)
        assert "nats disconnected" in caplog.text
        await nc.close()
    finally:
        server.stop()


async def test_a_server_gone_silent_is_left_after_the_unanswered_pings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Test that with ``nats.ping_interval_s`` a client drops a server that stops answering
    without closing the connection (stopped, as a host cut off by a partition looks) after
    about ``max_outstanding_pings`` + 1 intervals, not nats-py's minutes."""
    server = start_nats(tmp_path)
    try:
        nc = await connect_nats(
            NatsSettings(url=server.url, ping_interval_s=0.2, max_outstanding_pings=2),
            "pinging-client",
        )
        with caplog.at_level(logging.WARNING, logger="shared.bus"):
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                for _ in range(60):
                    if "nats disconnected" in caplog.text:
                        break
                    await asyncio.sleep(0.05)
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
        assert "nats disconnected" in caplog.text
        await nc.close()
    finally:
        server.stop()
