"""An in-process clock agent over the fake GPUs, for the clock tests."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from services.clockd.agent import run_agent
from shared.gpu.clock_agent import ClockAgentClient, ClockAgentUnreachableError
from shared.gpu.clock_lock import ClockLocker
from tests import fake_pynvml

__all__ = ["ROOT", "clockd_log", "running_agent", "start_clockd", "wait_answering"]


@asynccontextmanager
async def running_agent(path: Path) -> AsyncIterator[asyncio.Task[None]]:
    """An agent on the fake node, stopped (and its GPUs reset) on the way out."""
    ready = asyncio.Event()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_agent(ClockLocker(fake_pynvml), path, ready=ready.set, stop=stop)
    )
    await asyncio.wait_for(ready.wait(), 5.0)
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)


ROOT = Path(__file__).resolve().parents[3]


def start_clockd(socket_path: Path, state: Path | None) -> subprocess.Popen[bytes]:
    """``python -m services.clockd`` on the fake GPUs of ``state`` (None: no NVML at all).

    Its log goes to ``<socket>.log`` (see :func:`clockd_log`), not a pipe nobody drains.
    """
    env = {k: v for k, v in os.environ.items() if k != fake_pynvml.STATE_ENV}
    if state is not None:
        env[fake_pynvml.STATE_ENV] = str(state)
    with open(clockd_log(socket_path), "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.clockd",
                "--socket",
                str(socket_path),
                "--nvml-module",
                "tests.fake_pynvml",
            ],
            cwd=ROOT,
            env=env,
            stderr=log,
        )


def clockd_log(socket_path: Path) -> Path:
    """Where :func:`start_clockd` writes the agent's log."""
    return socket_path.with_name(f"{socket_path.name}.log")


def wait_answering(
    proc: subprocess.Popen[bytes], socket_path: Path, timeout_s: float = 20.0
) -> None:
    """Wait until the agent answers a status request (it serves after its start-up reset)."""
    client = ClockAgentClient(str(socket_path), timeout_s=2.0)
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, clockd_log(socket_path).read_text()
        try:
            if asyncio.run(client.status()).ok:
                return
        except ClockAgentUnreachableError:
            pass
        assert time.monotonic() < deadline, "the clock agent did not start"
        time.sleep(0.05)


def stop_gently(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> int:
    """SIGTERM ``proc`` and return its exit status (the agent resets its GPUs first)."""
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout_s)


def reap(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` if a failed test left it running."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
