"""The local stack's supervisor: an exited service is started again, with backoff, counted."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenserve.local import LocalStack, StackState, load_state, stop_state
from greenserve.local.processes import alive
from greenserve.local.server_commands import record_server, start_server
from greenserve.local.state import ServerCommand
from greenserve.local.supervisor import SupervisorSettings, backoff_s, save_state, supervise
from greenserve.runner import ProcessGroup
from shared.servers import ServerProcess

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


def test_a_killed_server_is_started_again_from_its_recorded_command(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Test that a recorded server killed with SIGKILL is started again from its recorded
    command line (the new PID in ``server_pids``, one restart counted), while a server
    recorded without a command (an older state file) is left alone."""
    server, legacy = subprocess.Popen(SLEEP), subprocess.Popen(SLEEP)
    started += [server, legacy]
    state = _state(os.getpid())
    state.server_pids = {"nats": server.pid, "legacy": legacy.pid}
    command = ServerCommand(args=[*SLEEP, "nats"], cwd=str(tmp_path))
    state.server_commands = {"nats": command}
    save_state(tmp_path, state)
    commands: list[ServerCommand] = []

    def start_again(recorded: ServerCommand) -> subprocess.Popen[bytes]:
        commands.append(recorded)
        proc = subprocess.Popen(SLEEP)
        started.append(proc)
        return proc

    settings = SupervisorSettings(poll_s=0.05, first_backoff_s=0.1)
    stop = threading.Event()
    watcher = threading.Thread(
        target=supervise, args=(tmp_path, settings, stop), kwargs={"start_again": start_again}
    )
    watcher.start()
    try:
        for proc in (server, legacy):
            proc.kill()
            proc.wait()
        _until(lambda: load_state(tmp_path).restarts.get("nats") == 1)
        time.sleep(0.3)  # several polls: the legacy server would have been restarted by now
        state = load_state(tmp_path)
        assert commands == [command]
        assert state.server_pids["nats"] != server.pid
        assert alive(state.server_pids["nats"], state)
        assert state.server_pids["legacy"] == legacy.pid
        assert "legacy" not in state.restarts
        assert state.server_commands == {"nats": command}
    finally:
        stop.set()
        watcher.join(5.0)


def test_a_server_s_environment_is_kept_owner_only_out_of_the_state_file(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Test that recording a server started with extra environment writes it to an
    owner-only file, not into the state file, and that starting the record again runs the
    same command line in the recorded directory with that environment."""
    out = tmp_path / "seen.json"
    script = (
        "import json, os, sys; "
        "json.dump([os.getcwd(), os.environ.get('GS_TEST_SECRET')], open(sys.argv[1], 'w'))"
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    server = ServerProcess(
        "nats",
        1,
        subprocess.Popen(["true"]),
        workdir,
        args=(sys.executable, "-c", script, str(out)),
        env={"GS_TEST_SECRET": "hunter2"},
    )
    started.append(server.proc)
    command = record_server(server, tmp_path, workdir)
    state = _state(os.getpid())
    state.server_commands = {"nats": command}
    save_state(tmp_path, state)

    assert command.env_file is not None
    assert stat.S_IMODE(Path(command.env_file).stat().st_mode) == 0o600
    assert "hunter2" not in (tmp_path / "stack.json").read_text()
    assert load_state(tmp_path).server_commands == {"nats": command}

    proc = start_server(command)
    started.append(proc)
    assert proc.wait(10.0) == 0
    assert json.loads(out.read_text()) == [str(workdir), "hunter2"]


def test_stopping_a_local_stack_stops_the_server_its_supervisor_started_again(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Test that ``LocalStack.stop`` stops the supervisor, then the server process the
    supervisor recorded in place of the one this process started (which had exited)."""
    supervisor, first, again = (subprocess.Popen(SLEEP) for _ in range(3))
    started += [supervisor, first, again]
    first.kill()
    first.wait()
    state = _state(os.getpid())
    state.pids = {}
    state.supervisor_pid = supervisor.pid
    state.server_pids = {"nats": first.pid}
    stack = LocalStack(
        state, tmp_path, ProcessGroup({}), [ServerProcess("nats", 1, first, tmp_path)]
    )
    recorded = dataclasses.replace(state, server_pids={"nats": again.pid})
    save_state(tmp_path, recorded)  # as the supervisor leaves it after the restart

    stack.stop(timeout_s=5.0)

    assert supervisor.wait(5.0) is not None
    assert again.wait(5.0) is not None
    assert not (tmp_path / "stack.json").exists()
