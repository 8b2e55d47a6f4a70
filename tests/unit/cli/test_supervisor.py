"""The local stack's supervisor: an exited service is started again, with backoff, counted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenserve.local import StackState, load_state, stop_state
from greenserve.local.processes import alive
from greenserve.local.supervisor import SupervisorSettings, backoff_s, save_state, supervise

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every process a test starts, killed at its end."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _state(pid: int) -> StackState:
    return StackState(
        namespace="sup",
        nats_url="nats://127.0.0.1:1",
        redis_url="redis://127.0.0.1:1",
        speedup=1.0,
        origin_wall_s=0.0,
        model="m",
        workers=1,
        pids={"planner": pid},
        modules={"planner": "services.planner"},
    )


def _until(check: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_backoff_doubles_per_restart_in_a_row_up_to_its_cap() -> None:
    """Test that the wait before a restart doubles from ``first_backoff_s`` to the cap."""
    settings = SupervisorSettings(first_backoff_s=0.5, max_backoff_s=3.0)
    assert [backoff_s(settings, n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="max_backoff_s"):
        SupervisorSettings(first_backoff_s=2.0, max_backoff_s=1.0)


def test_a_killed_service_is_started_again_and_counted(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Test that a recorded service killed with SIGKILL is started again by the supervisor
    (the new PID and one restart in the state file), a second kill waits the doubled
    backoff, and the supervisor ends when the state file is removed."""
    first = subprocess.Popen(SLEEP)
    started.append(first)
    save_state(tmp_path, _state(first.pid))
    starts: list[float] = []

    def start(_dir: Path, name: str, module: str) -> subprocess.Popen[bytes]:
        assert (name, module) == ("planner", "services.planner")
        starts.append(time.monotonic())
        proc = subprocess.Popen(SLEEP)
        started.append(proc)
        return proc

    settings = SupervisorSettings(poll_s=0.05, first_backoff_s=0.3, max_backoff_s=5.0)
    stop = threading.Event()
    watcher = threading.Thread(target=supervise, args=(tmp_path, settings, stop, start))
    watcher.start()
    try:
        killed_at = time.monotonic()
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        _until(lambda: load_state(tmp_path).restarts.get("planner") == 1)
        state = load_state(tmp_path)
        assert state.pids["planner"] != first.pid
        assert alive(state.pids["planner"], state)
        assert starts[0] - killed_at >= 0.3

        second_killed_at = time.monotonic()
        os.kill(state.pids["planner"], signal.SIGKILL)
        _until(lambda: load_state(tmp_path).restarts.get("planner") == 2)
        assert starts[1] - second_killed_at >= 0.6  # 0.3 doubled: the second in a row
        assert alive(load_state(tmp_path).pids["planner"], load_state(tmp_path))

        (tmp_path / "stack.json").unlink()
        watcher.join(5.0)
        assert not watcher.is_alive()
    finally:
        stop.set()
        watcher.join(5.0)


def test_down_stops_the_supervisor_before_the_services_it_would_restart(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Test that ``stop_state`` stops the recorded supervisor first, so the services' exits
    are not restarted, and stops the service the supervisor last recorded."""
    service = subprocess.Popen(SLEEP)
    supervisor = subprocess.Popen(SLEEP)
    started += [service, supervisor]
    state = _state(service.pid)
    state.supervisor_pid = supervisor.pid
    save_state(tmp_path, state)
    assert stop_state(tmp_path, timeout_s=5.0) == ["planner"]
    assert supervisor.wait(5.0) is not None
    assert service.wait(5.0) is not None
    assert not (tmp_path / "stack.json").exists()
