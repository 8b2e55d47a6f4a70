"""A worker's clock commands through the clock agent (worker.gpu_clocks nvml), fake GPUs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from services.worker.factory import build_backend
from services.worker.gpu_clocks import AgentClockedBackend
from services.worker.sim_backend import SimBackend
from shared.config import Settings
from shared.gpu.clock_agent import ClockAgentClient
from tests import fake_pynvml
from tests.unit.clocks.helpers import running_agent


def _backend(socket_path: Path, worker_id: str = "w-clk") -> AgentClockedBackend:
    settings = Settings(
        worker={
            "worker_id": worker_id,
            "gpu_clocks": "nvml",
            "nvml_gpu_indices": (0, 1),
            "clock_agent_socket": str(socket_path),
        }
    )
    backend = build_backend(settings)
    assert isinstance(backend, AgentClockedBackend)
    assert isinstance(backend.inner, SimBackend)
    return backend


def _count(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def test_gpu_clocks_without_gpu_indices_is_a_clear_error() -> None:
    """Test that the opt-in needs the instance's GPUs."""
    with pytest.raises(ValueError, match="nvml_gpu_indices"):
        build_backend(Settings(worker={"gpu_clocks": "nvml"}))


def test_clocks_stay_with_the_backend_unless_the_node_opts_in() -> None:
    """Test the default: no clock agent between the worker and its engine."""
    assert isinstance(build_backend(Settings()), SimBackend)


async def test_a_clock_command_locks_the_instance_gpus_and_the_simulator_follows(
    node: Path, socket_path: Path
) -> None:
    """Test the applied clock, the simulator's clock and the change-time histogram."""
    backend = _backend(socket_path)
    before = _count("greenserve_gpu_clock_change_seconds_count", worker="w-clk")
    async with running_agent(socket_path):
        outcome = await backend.set_clock(1003.0)
        assert (outcome.accepted, outcome.applied_mhz) == (True, 1005.0)
        assert "nearest" in outcome.reason
        assert fake_pynvml.locked_clocks(node) == [(1005, 1005), (1005, 1005)]
        assert backend.inner.snapshot().clock_mhz == pytest.approx(1005.0, abs=15.0)
        assert backend.snapshot().clock_mhz == 1005.0
        await backend.close()  # resets the worker's GPUs
        assert fake_pynvml.locked_clocks(node) == [None, None]
    assert _count("greenserve_gpu_clock_change_seconds_count", worker="w-clk") == before + 1


async def test_after_a_reset_elsewhere_the_worker_reports_the_default_clock(
    node: Path, socket_path: Path
) -> None:
    """Test that a reset the worker did not ask for (agent restart) shows in its snapshot."""
    backend = _backend(socket_path)
    async with running_agent(socket_path):
        await backend.set_clock(900.0)
        await ClockAgentClient(str(socket_path)).reset([0, 1])
        await backend.read_gpu_clock()  # what each stats period's refresh starts
        assert backend.snapshot().clock_mhz == 1410.0  # the driver's maximum: command again
        assert backend.inner.snapshot().clock_mhz == 1410.0


async def test_refusals_are_counted_each_time_and_logged_once(
    tmp_path: Path,
    socket_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Test a node without privilege: every command refused with the reason, one log error."""
    path = tmp_path / "gpus.json"
    fake_pynvml.write_state(path, [fake_pynvml.a100(), fake_pynvml.a100()], privileged=False)
    monkeypatch.setenv(fake_pynvml.STATE_ENV, str(path))
    backend = _backend(socket_path, "w-noperm")
    async with running_agent(socket_path):
        with caplog.at_level(logging.ERROR, logger="services.worker.gpu_clocks"):
            outcomes = [await backend.set_clock(mhz) for mhz in (900.0, 1000.0, 1100.0)]
    assert [o.accepted for o in outcomes] == [False] * 3
    assert all(o.reason.startswith("no_permission:") for o in outcomes)
    assert all(o.applied_mhz == 1410.0 for o in outcomes)  # the simulator was not moved
    ours = [r for r in caplog.records if r.name == "services.worker.gpu_clocks"]
    assert len(ours) == 1
    assert (
        _count("greenserve_gpu_clock_refusals_total", worker="w-noperm", reason="no_permission")
        == 3
    )
    assert fake_pynvml.locked_clocks(path) == [None, None]


async def test_an_unreachable_agent_is_a_refusal_not_a_crash(socket_path: Path) -> None:
    """Test a clock command with no agent running."""
    backend = _backend(socket_path, "w-noagent")
    outcome = await backend.set_clock(900.0)
    assert not outcome.accepted
    assert outcome.reason.startswith("agent_unreachable:")
    await backend.read_gpu_clock()  # no agent: the snapshot keeps the engine's clock
    assert backend.snapshot().clock_mhz == backend.inner.snapshot().clock_mhz
    await backend.refresh()
    await backend.close()
