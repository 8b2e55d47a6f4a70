"""``python -m services.clockd`` as its own process: SIGTERM resets the GPUs; no NVML, one error."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from shared.gpu.clock_agent import ClockAgentClient
from tests import fake_pynvml
from tests.unit.clocks.helpers import clockd_log, reap, start_clockd, stop_gently, wait_answering


def test_sigterm_resets_every_gpu_before_the_agent_exits(node: Path, socket_path: Path) -> None:
    """Test that a GPU left locked (by a crashed agent) is reset at start and again at SIGTERM."""
    state = fake_pynvml.read_state(node)
    state["gpus"][1]["locked"] = [600, 600]  # as a killed agent would leave it
    fake_pynvml.write_state(node, state["gpus"])
    proc = start_clockd(socket_path, node)
    try:
        wait_answering(proc, socket_path)
        assert fake_pynvml.locked_clocks(node) == [None, None]  # the start-up reset
        reply = asyncio.run(ClockAgentClient(str(socket_path)).lock([0], 810))
        assert reply.ok
        assert fake_pynvml.locked_clocks(node) == [(810, 810), None]
        assert stop_gently(proc) == 0
    finally:
        reap(proc)
    assert fake_pynvml.locked_clocks(node) == [None, None]
    assert not socket_path.exists()


def test_without_nvml_the_agent_exits_with_one_clear_error(socket_path: Path) -> None:
    """Test a node without the NVIDIA driver: exit status 2 and one error line."""
    proc = start_clockd(socket_path, None)
    assert proc.wait(timeout=30) == 2
    err = clockd_log(socket_path).read_text()
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1, err
    assert "NVML could not start" in errors[0]
    assert not socket_path.exists()


def test_a_node_without_privilege_starts_and_says_so_once(
    tmp_path: Path, socket_path: Path
) -> None:
    """Test NO_PERMISSION at the start-up reset: the agent serves, the log says why once."""
    state = tmp_path / "gpus.json"
    fake_pynvml.write_state(state, [fake_pynvml.a100(), fake_pynvml.a100()], privileged=False)
    proc = start_clockd(socket_path, state)
    try:
        wait_answering(proc, socket_path)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        reap(proc)
    assert proc.returncode == 0
    err = clockd_log(socket_path).read_text()
    assert err.count("NVML_ERROR_NO_PERMISSION") == 1, err
    assert len([line for line in err.splitlines() if " ERROR " in line]) == 1, err
