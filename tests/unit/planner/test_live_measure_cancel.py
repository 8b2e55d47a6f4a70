"""Cancelling a start-up measurement of the live planner does not wait for its child.

The measurement ran in ``with ProcessPoolExecutor(...)``: cancelled at shutdown, the
block's ``shutdown(wait=True)`` blocked the event loop until the child's profiling ended,
and the child went on profiling.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from services.planner import profile_jobs
from services.planner.live_profiles import ModeProfileJob, ProfileRequest
from services.planner.live_service import LivePlanner, ProfileKey
from shared.config import Settings
from shared.lifecycle import ServiceContext

STARTED_ENV = "GS_TEST_MEASURE_STARTED"
"""File the slow job writes its pid to when it starts (the spawned child inherits it)."""

JOB_S = 8.0


def slow_profiles(_job: ModeProfileJob) -> tuple[tuple[()], tuple[()]]:
    """Stand-in for the profiling: announce the child's pid, then take JOB_S seconds."""
    Path(os.environ[STARTED_ENV]).write_text(str(os.getpid()))
    time.sleep(JOB_S)
    return (), ()


def _planner() -> LivePlanner:
    ctx = SimpleNamespace(settings=Settings(planner={"mode": "milp"}))
    return LivePlanner(cast(ServiceContext, ctx))


async def _start(
    planner: LivePlanner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ProfileKey, asyncio.Task[object], int]:
    """Start one measurement of the slow job and wait until its child runs it."""
    started = tmp_path / "started"
    monkeypatch.setenv(STARTED_ENV, str(started))
    monkeypatch.setattr(profile_jobs, "live_mode_profiles", slow_profiles)
    key: ProfileKey = ("A100", 1, "llama-3-8b", 64, False, 0)
    job = ModeProfileJob(
        request=ProfileRequest(gpu="A100-80GB", tp=1, model="llama-3-8b", scheme="dynamollm")
    )
    task = planner._measuring[key] = asyncio.create_task(planner._measure(key, job))
    deadline = time.monotonic() + 20.0  # a spawned interpreter starts slowly on a busy runner
    while not started.exists() or not started.read_text():
        assert time.monotonic() < deadline, "the child never started the job"
        assert not task.done()
        await asyncio.sleep(0.05)
    return key, cast(asyncio.Task[object], task), int(started.read_text())


async def _child_gone(pid: int) -> bool:
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        if pid not in {p.pid for p in multiprocessing.active_children()}:  # reaps the ended
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_cancelled_measurement_ends_at_once_and_stops_its_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that cancelling the measuring task returns well within the job's time, and the
    child is terminated rather than left profiling."""
    planner = _planner()
    key, task, pid = await _start(planner, tmp_path, monkeypatch)
    began = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - began < 1.0  # the job has JOB_S seconds to go
    assert key not in planner._measuring  # not measured: may be asked for again
    assert await _child_gone(pid)


async def test_closing_the_planner_cancels_its_measurements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that close() (the shell's shutdown) ends a measurement in progress quickly."""
    planner = _planner()
    _key, task, pid = await _start(planner, tmp_path, monkeypatch)
    began = time.monotonic()
    await planner.close()
    assert time.monotonic() - began < 1.0
    assert task.cancelled()
    assert await _child_gone(pid)
