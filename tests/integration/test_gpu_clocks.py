"""GPU clocks on an opted-in node: the dvfs agent's ClockCommand ends as a locked clock on
the (fake) GPUs, through the worker and the clock agent process; a clock agent killed with
SIGKILL leaves the GPUs locked until it restarts, and its restart resets them.

Real nats-server and redis-server; the clock agent is ``python -m services.clockd`` on
``tests.fake_pynvml``, whose GPUs live in a state file both processes share.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from services.dvfs.service import serve as serve_dvfs
from services.worker.service import serve as serve_worker
from shared.config import Settings
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests import fake_pynvml
from tests.unit.clocks.helpers import clockd_log, reap, start_clockd, stop_gently, wait_answering

pytestmark = pytest.mark.connected

TARGET_MHZ = 1200
"""The fixed dvfs clock: an A100 step (210 + 15 k), below the GPUs' default 1410 MHz."""


@pytest.fixture
def node_dir() -> Iterator[Path]:
    """A short folder for the socket (Unix socket paths are limited) and the fake GPUs."""
    folder = Path(tempfile.mkdtemp(prefix="gsclk", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _settings(namespace: str, nats: ServerProcess, redis: ServerProcess, sock: Path) -> Settings:
    return Settings(
        namespace=namespace,
        nats={"url": nats.url},
        redis={"url": redis.url},
        worker={
            "worker_id": "w-gpu",
            "node_id": "n-gpu",
            "backend": "instant",
            "gpu_clocks": "nvml",
            "nvml_gpu_indices": (0, 1),
            "clock_agent_socket": str(sock),
            "stats_period_s": 0.2,
        },
        dvfs={"node_id": "n-gpu", "mode": "fixed", "clock_mhz": TARGET_MHZ, "period_s": 0.2},
    )


@asynccontextmanager
async def node_services(settings: Settings) -> AsyncIterator[None]:
    """The worker and the dvfs agent of the node, in this event loop."""
    async with (
        service_context("worker", settings) as worker_ctx,
        service_context("dvfs", settings) as dvfs_ctx,
    ):
        tasks = [
            asyncio.create_task(serve_worker(worker_ctx)),
            asyncio.create_task(serve_dvfs(dvfs_ctx)),
        ]
        try:
            yield
        finally:
            worker_ctx.stop.set()
            dvfs_ctx.stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 20.0)


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _locked_at(state: Path, mhz: int) -> Callable[[], bool]:
    return lambda: fake_pynvml.locked_clocks(state) == [(mhz, mhz), (mhz, mhz)]


async def test_a_dvfs_clock_command_becomes_a_locked_clock_and_survives_an_agent_kill(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str, node_dir: Path
) -> None:
    """Test the path dvfs agent → worker → clock agent → NVML, then SIGKILL and restart."""
    state = node_dir / "gpus.json"
    sock = node_dir / "clockd.sock"
    fake_pynvml.write_state(state, [fake_pynvml.a100(), fake_pynvml.a100()])
    agent = start_clockd(sock, state)
    try:
        await asyncio.to_thread(wait_answering, agent, sock)
        async with node_services(_settings(namespace, nats_server, redis_server, sock)):
            await _until(_locked_at(state, TARGET_MHZ), "the dvfs clock on both GPUs")

            # A crash: SIGKILL runs no clean-up, so the GPUs stay pinned ...
            agent.send_signal(signal.SIGKILL)
            await asyncio.to_thread(agent.wait, 10)
            assert fake_pynvml.locked_clocks(state) == [(TARGET_MHZ, TARGET_MHZ)] * 2
            calls_before = len(fake_pynvml.read_state(state)["calls"])

            # ... until the agent starts again: its first act is to reset every GPU.
            agent = start_clockd(sock, state)
            await asyncio.to_thread(wait_answering, agent, sock)
            after = fake_pynvml.read_state(state)["calls"][calls_before:]
            assert after[:2] == [
                "nvmlDeviceResetGpuLockedClocks(0)",
                "nvmlDeviceResetGpuLockedClocks(1)",
            ]
            # The worker now reports the default clock, so the dvfs agent commands its
            # clock again and the GPUs are locked at it once more.
            await _until(_locked_at(state, TARGET_MHZ), "the clock applied again")
            relocks = fake_pynvml.read_state(state)["calls"][calls_before + 2 :]
            assert f"nvmlDeviceSetGpuLockedClocks(0,{TARGET_MHZ},{TARGET_MHZ})" in relocks
        # The worker asked for its GPUs to be reset when it stopped.
        assert fake_pynvml.locked_clocks(state) == [None, None]
        assert await asyncio.to_thread(stop_gently, agent) == 0
    finally:
        reap(agent)
    calls = fake_pynvml.read_state(state)["calls"]
    assert not [c for c in calls if "Power" in c]
    assert "Traceback" not in clockd_log(sock).read_text()


async def test_a_node_without_clock_privilege_runs_at_default_clocks_and_says_so_once(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    node_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Test NVML_ERROR_NO_PERMISSION end to end: every period's command refused and counted,
    no GPU changed, the worker and the dvfs agent each log the cause once."""
    state = node_dir / "gpus.json"
    sock = node_dir / "clockd.sock"
    fake_pynvml.write_state(state, [fake_pynvml.a100(), fake_pynvml.a100()], privileged=False)
    agent = start_clockd(sock, state)
    try:
        await asyncio.to_thread(wait_answering, agent, sock)
        before = _refusals()
        with caplog.at_level(logging.WARNING):
            async with node_services(_settings(namespace, nats_server, redis_server, sock)):
                await _until(lambda: _refusals() >= before + 3, "three refusals")
        assert await asyncio.to_thread(stop_gently, agent) == 0
    finally:
        reap(agent)
    assert fake_pynvml.locked_clocks(state) == [None, None]
    assert fake_pynvml.read_state(state)["calls"] == []
    worker_errors = [r for r in caplog.records if r.name == "services.worker.gpu_clocks"]
    dvfs_warnings = [r for r in caplog.records if "refused clock" in r.getMessage()]
    assert len(worker_errors) == 1, [r.getMessage() for r in worker_errors]
    assert "CAP_SYS_ADMIN" in worker_errors[0].getMessage()
    assert len(dvfs_warnings) == 1, [r.getMessage() for r in dvfs_warnings]
    log = clockd_log(sock).read_text()
    assert log.count("NVML_ERROR_NO_PERMISSION") == 1, log


def _refusals() -> float:
    labels = {"worker": "w-gpu", "reason": "no_permission"}
    return REGISTRY.get_sample_value("greenserve_gpu_clock_refusals_total", labels) or 0.0
