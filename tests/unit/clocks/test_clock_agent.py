"""The clock agent's socket protocol, served in-process over the fake GPUs."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from services.clockd.agent import CHANGE_SECONDS, REFUSALS, SOCKET_MODE, run_agent
from shared.gpu.clock_agent import MAX_LINE_BYTES, ClockAgentClient, ClockAgentUnreachableError
from shared.gpu.clock_lock import ClockLocker
from tests import fake_pynvml
from tests.unit.clocks.helpers import running_agent


def _sample(metric: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(metric, labels)
    return 0.0 if value is None else value


async def test_lock_status_and_reset_over_the_socket(node: Path, socket_path: Path) -> None:
    """Test the three requests end to end, the snapping note and the change-time histogram."""
    before = _sample("greenserve_clockd_change_seconds_count", op="lock")
    async with running_agent(socket_path):
        assert stat.S_IMODE(os.stat(socket_path).st_mode) == SOCKET_MODE
        client = ClockAgentClient(str(socket_path))
        reply = await client.lock([0, 1], 1001)
        assert (reply.ok, reply.applied_mhz, reply.snapped) == (True, 1005, True)
        assert "nearest" in reply.message
        assert fake_pynvml.locked_clocks(node) == [(1005, 1005), (1005, 1005)]
        status = await client.status([1])
        assert [(g.index, g.sm_clock_mhz, g.locked_mhz) for g in status.gpus] == [(1, 1005, 1005)]
        assert (await client.reset([0])).ok
        assert fake_pynvml.locked_clocks(node) == [None, (1005, 1005)]
    assert fake_pynvml.locked_clocks(node) == [None, None]  # reset at exit
    assert socket_path.name not in os.listdir(socket_path.parent)  # removed at exit
    assert _sample("greenserve_clockd_change_seconds_count", op="lock") == before + 1
    assert CHANGE_SECONDS is not None


async def test_a_refusal_carries_its_reason_and_is_counted(node: Path, socket_path: Path) -> None:
    """Test that an out-of-range clock is answered with the reason and counted."""
    before = _sample("greenserve_clockd_refusals_total", reason="out_of_range")
    async with running_agent(socket_path):
        reply = await ClockAgentClient(str(socket_path)).lock([0], 5000)
    assert (reply.ok, reply.reason) == (False, "out_of_range")
    assert "210-1410 MHz" in reply.message
    assert _sample("greenserve_clockd_refusals_total", reason="out_of_range") == before + 1
    assert REFUSALS is not None


async def test_bad_lines_get_bad_request_and_the_connection_carries_on(
    node: Path, socket_path: Path
) -> None:
    """Test garbage, an unknown op and an unknown field, then a good request, on one connection."""
    async with running_agent(socket_path):
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        lines = [
            b"not json\n",
            b'{"op": "overclock", "gpus": [0]}\n',
            b'{"op": "lock", "gpus": [0], "clock_mhz": 900, "power_w": 100}\n',
            b'{"op": "lock", "gpus": [0], "clock_mhz": 900}\n',
        ]
        replies = []
        for line in lines:
            writer.write(line)
            await writer.drain()
            replies.append(await reader.readline())
        writer.close()
        await writer.wait_closed()
    assert [b'"reason":"bad_request"' in r for r in replies] == [True, True, True, False]
    assert b'"applied_mhz":900' in replies[3]


async def test_an_over_long_line_is_refused_and_the_connection_closed(
    node: Path, socket_path: Path
) -> None:
    """Test that a line past the limit gets one refusal, then EOF."""
    async with running_agent(socket_path):
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(b'{"op": "status", "gpus": [' + b"0," * MAX_LINE_BYTES + b"0]}\n")
        await writer.drain()
        reply = await reader.readline()
        rest = await reader.read()
        writer.close()
    assert b"bad_request" in reply
    assert b"longer than" in reply
    assert rest == b""


async def test_a_second_agent_on_the_same_socket_fails_without_touching_clocks(
    node: Path, socket_path: Path
) -> None:
    """Test that starting a second agent does not reset the clocks the first one locked."""
    async with running_agent(socket_path):
        await ClockAgentClient(str(socket_path)).lock([0], 1200)
        with pytest.raises(RuntimeError, match="another clock agent"):
            await run_agent(ClockLocker(fake_pynvml), socket_path)
        assert fake_pynvml.locked_clocks(node) == [(1200, 1200), None]
        assert (await ClockAgentClient(str(socket_path)).status()).ok


async def test_a_stale_socket_file_of_a_killed_agent_is_replaced(
    node: Path, socket_path: Path
) -> None:
    """Test that a leftover socket nobody listens on does not keep the agent from starting."""
    import socket

    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(socket_path))
    leftover.close()  # the file stays, as after a SIGKILL
    async with running_agent(socket_path):
        assert (await ClockAgentClient(str(socket_path)).status()).ok


async def test_the_client_says_when_no_agent_listens(socket_path: Path) -> None:
    """Test the client's error for a missing agent."""
    with pytest.raises(ClockAgentUnreachableError, match="cannot reach the clock agent"):
        await ClockAgentClient(str(socket_path), timeout_s=1.0).status()


async def test_nvml_calls_never_block_the_event_loop(node: Path, socket_path: Path) -> None:
    """Test that a slow driver call (0.4 s) runs off the loop: the loop keeps ticking."""
    state = fake_pynvml.read_state(node)
    for gpu in state["gpus"]:
        gpu["set_delay_s"] = 0.2
    fake_pynvml.write_state(node, state["gpus"])
    gaps: list[float] = []
    loop = asyncio.get_running_loop()

    async def tick() -> None:
        last = loop.time()
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            gaps.append(now - last)
            last = now

    async with running_agent(socket_path):
        ticker = asyncio.create_task(tick())
        reply = await ClockAgentClient(str(socket_path)).lock([0, 1], 1200)
        ticker.cancel()
    assert reply.ok
    assert reply.took_s >= 0.4  # the time measured is the driver's
    assert max(gaps) < 0.15, max(gaps)


async def test_an_unexpected_driver_error_is_answered_and_the_agent_serves_on(
    node: Path, socket_path: Path
) -> None:
    """Test that an exception NVML is not documented to raise ends one request, not the agent."""
    state = fake_pynvml.read_state(node)
    state["gpus"][0]["set_delay_s"] = "not a number"  # the fake's sleep raises ValueError
    fake_pynvml.write_state(node, state["gpus"])
    async with running_agent(socket_path):
        client = ClockAgentClient(str(socket_path))
        reply = await client.lock([0], 1200)
        assert (reply.ok, reply.reason) == (False, "nvml_error")
        assert (await client.lock([1], 1200)).ok
