"""The processes of a recorded stack: whether each still runs, and stopping them.

A state file outlives its processes (a crash, a reboot), and a PID may name another
process by now: where the state file recorded a start time (``/proc``), a PID counts as
the stack's only while its process still has that start time. ``greenserve down`` stops
a stack from another shell with :func:`stop_state`; the shell that started it stops it
with ``LocalStack.stop``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from greenserve.local.state import DEFAULT_STATE_DIR, STATE_FILE, StackState, load_state

__all__ = ["alive", "start_ticks", "stop_pids", "stop_state", "stop_supervisor"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # ``kill(pid, 0)`` succeeds on a zombie: a process that ended but that its parent (the
    # ``greenserve up --foreground`` of another shell, say) has not reaped yet.
    return not _zombie(pid)


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after ``pid (comm)``; empty without ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    # comm may hold spaces and parentheses: the fields start after the last ``)``.
    return stat.rpartition(")")[2].split()


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has ended and waits to be reaped (False where ``/proc`` is not)."""
    return _stat(pid)[:1] == ["Z"]


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``)."""
    fields = _stat(pid)
    return int(fields[19]) if len(fields) > 19 else None


def _signal(pid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to ``pid``; False when it had ended already (it may end at any moment)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_state(
    state_dir: Path = DEFAULT_STATE_DIR,
    timeout_s: float = 15.0,
    before_servers: Callable[[StackState], None] | None = None,
) -> list[str]:
    """Stop a stack recorded in the state dir (from another process); return what was stopped.

    ``before_servers(state)`` runs once the services have stopped and while the servers
    still run (``greenserve down`` answers the requests left in them), for each cell too.
    """
    state = load_state(state_dir)
    if stop_supervisor(state, timeout_s):
        # It may have restarted a service since the file was read: stop what it records now.
        state = load_state(state_dir)
    stopped: list[str] = []
    for cell in state.cells:  # on this stack's servers: stop them before the servers
        if (Path(cell) / STATE_FILE).exists():
            stopped += stop_state(Path(cell), timeout_s, before_servers)
    stopped += stop_pids(state.pids, state, timeout_s)
    if before_servers is not None:
        before_servers(state)
    # Sentinels first: a Redis primary stopping under their eyes would be failed over.
    watchers = {n: p for n, p in state.server_pids.items() if n.startswith("sentinel")}
    stopped += stop_pids(watchers, state, timeout_s)
    rest = {n: p for n, p in state.server_pids.items() if n not in watchers}
    stopped += stop_pids(rest, state, timeout_s)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return stopped


def stop_pids(pids: dict[str, int], state: StackState, timeout_s: float) -> list[str]:
    """SIGTERM each of ``pids`` that is still the recorded process, SIGKILL what is left
    after ``timeout_s``; return the names signalled."""
    ours = {name: pid for name, pid in pids.items() if alive(pid, state)}
    stopped = [name for name, pid in ours.items() if _signal(pid, signal.SIGTERM)]
    deadline = time.monotonic() + timeout_s
    for pid in ours.values():
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
    return stopped


def stop_supervisor(state: StackState, timeout_s: float = 15.0) -> bool:
    """Stop the stack's supervisor, if one runs; return whether one did.

    First of all, so that the services' exits that follow are not restarted.
    """
    pid = state.supervisor_pid
    if pid is None or not alive(pid, state):
        return False
    stop_pids({"supervisor": pid}, state, timeout_s)
    return True


def alive(pid: int, state: StackState | None = None) -> bool:
    """Whether a process exists (and, given the ``state`` that recorded it, is still the
    process it recorded, not a later one that was given the same PID)."""
    if not _alive(pid):
        return False
    recorded = state.start_ticks.get(str(pid)) if state is not None else None
    return recorded is None or start_ticks(pid) in (None, recorded)
