"""``greenserve up``/``down`` supervision: no process left behind, no stack orphaned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

import greenserve.local.startup as startup
from greenserve.cli import build_parser
from greenserve.commands import demo, up
from greenserve.local import STATE_FILE, LocalStack, StackState, start_local_stack, stop_state
from greenserve.runner import ProcessGroup
from greenserve.stack import ServiceLaunch, StackSpec
from shared.servers import ServerProcess

NATS_URL, REDIS_URL = "nats://127.0.0.1:1", "redis://127.0.0.1:1"


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; whatever a test leaves running is killed after it."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _sleep(procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    procs.append(proc)
    return proc


def _state(pids: dict[str, int]) -> StackState:
    return StackState(
        namespace="gs",
        nats_url=NATS_URL,
        redis_url=REDIS_URL,
        speedup=1.0,
        origin_wall_s=0.0,
        model="m",
        workers=1,
        pids=pids,
    )


def test_a_failed_start_stops_the_services_it_already_started(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """Test that when one service cannot be started, the ones started before it are stopped:
    they run in their own sessions, so nothing else would ever stop them, and no state file
    names them for ``greenserve down``."""

    def start(launch: ServiceLaunch, folder: Path) -> subprocess.Popen[bytes]:
        if len(sleepers) == 3:
            raise OSError("no more processes")
        return _sleep(sleepers)

    monkeypatch.setattr(startup, "start_process", start)
    with pytest.raises(OSError, match="no more processes"):
        start_local_stack(StackSpec(workers=1), tmp_path, nats_url=NATS_URL, redis_url=REDIS_URL)
    assert len(sleepers) == 3
    deadline = time.monotonic() + 10
    while any(p.poll() is None for p in sleepers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p.poll() is not None for p in sleepers] == [True] * 3
    assert not (tmp_path / STATE_FILE).exists()


def test_up_refuses_a_state_dir_whose_stack_still_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """Test that a second ``up`` in the same state dir refuses, naming ``down``: it would
    overwrite the state file (so ``down`` could no longer find the first stack) and wipe the
    JetStream store under the first stack's running NATS."""
    running = _sleep(sleepers)
    (tmp_path / STATE_FILE).write_text(json.dumps(asdict(_state({"planner": running.pid}))))
    before = (tmp_path / STATE_FILE).read_text()
    (tmp_path / "nats").mkdir()

    def start(launch: ServiceLaunch, folder: Path) -> subprocess.Popen[bytes]:
        raise AssertionError("nothing may start over a running stack")

    monkeypatch.setattr(startup, "start_process", start)
    with pytest.raises(RuntimeError, match="greenserve down"):
        start_local_stack(StackSpec(workers=1), tmp_path)
    assert (tmp_path / STATE_FILE).read_text() == before
    assert (tmp_path / "nats").is_dir()
    assert running.poll() is None


def test_up_takes_over_the_state_dir_of_a_stack_that_is_gone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """Test that a state file whose processes all ended (a crash, a reboot) does not block
    the next ``up``."""
    gone = _sleep(sleepers)
    gone.kill()
    gone.wait()
    (tmp_path / STATE_FILE).write_text(json.dumps(asdict(_state({"planner": gone.pid}))))
    monkeypatch.setattr(startup, "start_process", lambda launch, folder: _sleep(sleepers))
    stack = start_local_stack(
        StackSpec(workers=1), tmp_path, nats_url=NATS_URL, redis_url=REDIS_URL
    )
    try:
        assert json.loads((tmp_path / STATE_FILE).read_text())["pids"] == stack.state.pids
    finally:
        stack.stop(timeout_s=5)


def test_down_does_not_wait_out_its_timeout_on_a_process_that_is_a_zombie(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """Test that ``down`` counts an ended process that its parent has not reaped yet (the
    services of ``up --foreground``, whose parent is that other shell's ``up``) as ended:
    ``kill(pid, 0)`` still succeeds on a zombie, so ``down`` waited its whole timeout."""
    # A parent that never reaps its child: sh starts the child, then execs a sleep.
    parent = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; exec sleep 60"], stdout=subprocess.PIPE
    )
    sleepers.append(parent)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    (tmp_path / STATE_FILE).write_text(json.dumps(asdict(_state({"worker-0": child}))))
    started = time.monotonic()
    assert stop_state(tmp_path, timeout_s=5.0) == ["worker-0"]
    assert time.monotonic() - started < 2.5
    assert not (tmp_path / STATE_FILE).exists()


def test_down_copes_with_a_process_that_ends_on_its_own_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """Test that a process ending between ``down``'s liveness check and its signal does not
    end ``down`` with ``ProcessLookupError`` (leaving the servers running and the state file
    in place)."""
    first, second = _sleep(sleepers), _sleep(sleepers)
    state = _state({"planner": first.pid})
    state.server_pids = {"nats": second.pid}
    (tmp_path / STATE_FILE).write_text(json.dumps(asdict(state)))
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        if pid == first.pid and sig == signal.SIGTERM:
            first.kill()  # it ends just before the signal arrives
            first.wait()
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", kill)
    stop_state(tmp_path, timeout_s=5.0)
    assert second.wait(5) is not None
    assert not (tmp_path / STATE_FILE).exists()


def test_a_pid_that_another_process_took_over_is_not_the_stack_s(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """Test a state file left by a stack that crashed, whose PIDs now name other processes
    (PIDs are reused; after a reboot every one is): ``down`` must not signal them, and
    ``up`` must not refuse to start because of them. The state file records each process's
    start time, which the newcomer does not share."""
    stranger = _sleep(sleepers)
    state = _state({"planner": stranger.pid})
    state.start_ticks = {str(stranger.pid): 1}  # the recorded planner started at boot
    (tmp_path / STATE_FILE).write_text(json.dumps(asdict(state)))
    assert stop_state(tmp_path, timeout_s=1.0) == []
    assert stranger.poll() is None
    (tmp_path / STATE_FILE).write_text(json.dumps(asdict(state)))
    monkeypatch.setattr(startup, "start_process", lambda launch, folder: _sleep(sleepers))
    stack = start_local_stack(
        StackSpec(workers=1), tmp_path, nats_url=NATS_URL, redis_url=REDIS_URL
    )
    try:
        recorded = json.loads((tmp_path / STATE_FILE).read_text())
        assert set(recorded["start_ticks"]) == {str(pid) for pid in stack.state.pids.values()}
    finally:
        stack.stop(timeout_s=5)
    assert stranger.poll() is None


def test_wait_ready_says_the_stack_is_not_ready_when_its_redis_is_unreachable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """Test that a Redis that does not answer while ``up`` waits for readiness ends the wait
    with the ``RuntimeError`` that ``up`` reports (and then stops the stack on), not with a
    Redis ``ConnectionError`` traceback that leaves every process running."""
    monkeypatch.setattr(startup, "start_process", lambda launch, folder: _sleep(sleepers))
    stack = start_local_stack(
        StackSpec(workers=1), tmp_path, nats_url=NATS_URL, redis_url=REDIS_URL
    )
    try:
        with pytest.raises(RuntimeError, match=r"not ready within 1\.0 s; redis unreachable"):
            stack.wait_ready(timeout_s=1.0)
    finally:
        stack.stop(timeout_s=5)


def test_wait_ready_names_a_server_that_exited(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """Test that a server of the stack that exits while ``up`` waits is named at once, with
    where its log is, instead of the wait running out its minute on an unreachable Redis."""
    monkeypatch.setattr(startup, "start_process", lambda launch, folder: _sleep(sleepers))
    stack = start_local_stack(
        StackSpec(workers=1), tmp_path, nats_url=NATS_URL, redis_url=REDIS_URL
    )
    gone = _sleep(sleepers)
    gone.kill()
    gone.wait()
    stack.servers.append(ServerProcess("redis", 1, gone, tmp_path / "redis"))
    try:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="servers exited during start-up: redis"):
            stack.wait_ready(timeout_s=30.0)
        assert time.monotonic() - started < 5.0
    finally:
        stack.servers.clear()
        stack.stop(timeout_s=5)


def test_demo_over_a_running_stack_says_so_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    """Test that ``greenserve demo`` in a state dir whose stack runs exits 1 with the refusal
    (naming ``down``) on one line, not a traceback, and leaves that stack alone."""
    running = _sleep(sleepers)
    (tmp_path / STATE_FILE).write_text(json.dumps(asdict(_state({"planner": running.pid}))))
    parser, _modules = build_parser()
    args = parser.parse_args(["demo", "--state-dir", str(tmp_path), "--duration", "5"])
    assert demo.run(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("greenserve demo failed: ")
    assert "greenserve down" in err[0]
    assert running.poll() is None


def _foreground(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> list[LocalStack]:
    (tmp_path / STATE_FILE).write_text("{}")
    group = ProcessGroup({f"p{i}": proc for i, proc in enumerate(procs)})
    return [LocalStack(_state({}), tmp_path, group, [])]


def test_a_foreground_up_ends_when_down_removes_its_state_file(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """Test that ``up --foreground`` stops waiting once ``greenserve down`` (another shell)
    has removed the state file, instead of waiting for a signal that never comes."""
    stacks = _foreground(tmp_path, [_sleep(sleepers)])
    timer = threading.Timer(0.3, (tmp_path / STATE_FILE).unlink)
    timer.start()
    started = time.monotonic()
    why = up.wait_in_foreground(stacks, threading.Event(), poll_s=0.05)
    timer.join()
    assert "state file" in why
    assert time.monotonic() - started < 5.0


def test_a_foreground_up_ends_when_every_service_has_exited_and_reaps_them(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """Test that the wait ends once all its children have exited (reaped, not zombies), and
    that a signal still ends it at once."""
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    sleepers.append(quick)
    why = up.wait_in_foreground(_foreground(tmp_path, [quick]), threading.Event(), poll_s=0.05)
    assert why == "every service has exited"
    assert quick.returncode == 0
    signalled = threading.Event()
    signalled.set()
    stacks = _foreground(tmp_path, [_sleep(sleepers)])
    assert up.wait_in_foreground(stacks, signalled, poll_s=0.05) == "signal"
