"""Dropping a worker's NATS connection that went silent (services/worker/contact.py): the
socket is reset, not closed gracefully, and the client moves to the next server."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

import nats
import pytest

from services.worker.contact import drop_connection
from shared.servers import start_nats

pytestmark = pytest.mark.connected


async def test_a_dropped_connection_is_reset_and_the_client_moves_on(tmp_path: Path) -> None:
    """Test that drop_connection sets a zero linger on the live socket before it aborts it
    (so the kernel discards what is queued rather than delivering it later), that the
    client reconnects to the next server of its list, and that messages flow there."""
    first, second = start_nats(tmp_path / "a"), start_nats(tmp_path / "b")
    try:
        nc = await nats.connect(
            servers=[first.url, second.url], dont_randomize=True, reconnect_time_wait=0.1
        )
        try:
            assert nc.connected_url is not None
            assert nc.connected_url.port == first.port
            writer = nc._transport._io_writer  # type: ignore[union-attr]
            assert writer is not None
            sock = writer.get_extra_info("socket")
            seen: list[tuple[int, int]] = []
            abort = writer.transport.abort

            def abort_and_record() -> None:
                raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8)
                seen.append(struct.unpack("ii", raw))
                abort()

            writer.transport.abort = abort_and_record
            await drop_connection(nc)
            assert seen == [(1, 0)]
            for _ in range(100):
                if nc.is_connected and nc.stats["reconnects"] == 1:
                    break
                await asyncio.sleep(0.05)
            assert nc.stats["reconnects"] == 1
            assert nc.connected_url is not None
            assert nc.connected_url.port == second.port
            got = await nc.subscribe("after.drop")
            await nc.publish("after.drop", b"x")
            message = await got.next_msg(timeout=2.0)
            assert message.data == b"x"
        finally:
            await nc.close()
    finally:
        first.stop()
        second.stop()
