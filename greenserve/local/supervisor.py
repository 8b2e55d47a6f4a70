"""The supervisor of a local stack: a service or server that exits is started again.

``greenserve up`` starts one supervisor process per stack (``python -m
greenserve.local.supervisor --state-dir DIR``). It outlives ``up`` (which returns once the
stack is ready), so it watches the processes through the state file rather than as their
parent: every ``poll_s`` it checks each recorded PID (:func:`alive`, which tells a reused
PID from the one recorded) and starts one that has exited again, after an exponential
backoff (``first_backoff_s`` doubling to ``max_backoff_s``; a process that ran
``reset_after_s`` starts over from the first). A service starts from the settings file
``up`` wrote; a server ``up`` started (nats-server nodes, redis-server, a replica, the
Sentinels) from the command line it recorded (:mod:`greenserve.local.server_commands`),
so it comes back on its port with its JetStream store or append-only file. A server given
by URL is not the stack's and is not watched. Each restart is counted in the state file
(``restarts``, shown by ``greenserve status``) and logged to ``logs/supervisor.log``.

Any exit counts as unexpected: ``greenserve down`` (and ``LocalStack.stop``) stop the
supervisor first, then the services and servers, so a stop is never mistaken for a crash.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from greenserve.local.processes import alive, start_ticks
from greenserve.local.server_commands import start_server
from greenserve.local.state import STATE_FILE, ServerCommand, StackState, load_state
from shared.config import CONFIG_FILE_ENV
from shared.security.secrets import write_secret

__all__ = [
    "SUPERVISOR_MODULE",
    "SupervisorSettings",
    "backoff_s",
    "main",
    "save_state",
    "start_supervisor",
    "supervise",
]

logger = logging.getLogger(__name__)

SUPERVISOR_MODULE = "greenserve.local.supervisor"


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    """How the supervisor watches and restarts."""

    poll_s: float = 0.5
    """How often every service's and server's PID is checked."""
    first_backoff_s: float = 0.5
    """Wait before the first restart of a process that exited."""
    max_backoff_s: float = 30.0
    """The backoff doubles per restart in a row up to this."""
    reset_after_s: float = 60.0
    """A process that ran this long since its restart starts over from ``first_backoff_s``."""

    def __post_init__(self) -> None:
        if min(self.poll_s, self.first_backoff_s, self.reset_after_s) <= 0:
            raise ValueError(f"supervisor periods must be positive: {self!r}")
        if self.max_backoff_s < self.first_backoff_s:
            raise ValueError("max_backoff_s must be at least first_backoff_s")

    def as_args(self) -> list[str]:
        """Command-line options that give these settings to a supervisor process."""
        return [
            f"--{f.name.replace('_', '-')}={getattr(self, f.name)}"
            for f in dataclasses.fields(self)
        ]


def backoff_s(settings: SupervisorSettings, in_a_row: int) -> float:
    """The wait before restart number ``in_a_row`` (1 = the first since a healthy run)."""
    return min(settings.max_backoff_s, settings.first_backoff_s * 2.0 ** max(0, in_a_row - 1))


def save_state(state_dir: Path, state: StackState) -> None:
    """Write the state file whole or not at all: other shells read it at any moment."""
    path = state_dir / STATE_FILE
    staged = write_secret(path.with_suffix(".tmp"), json.dumps(dataclasses.asdict(state), indent=2))
    os.replace(staged, path)


def start_service(state_dir: Path, name: str, module: str) -> subprocess.Popen[bytes]:
    """Start ``python -m module`` on the settings file ``up`` wrote for ``name``."""
    config = state_dir / "config" / f"{name}.yaml"
    log = (state_dir / "logs" / f"{name}.log").open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", module],
            env={**os.environ, CONFIG_FILE_ENV: str(config)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()  # the child holds its own descriptor


@dataclass(slots=True)
class _Watch:
    in_a_row: int = 0
    restart_at: float | None = None
    started_at: float = dataclasses.field(default_factory=time.monotonic)


Launch = Callable[[], subprocess.Popen[bytes]]
"""Starts one watched process again."""


def supervise(
    state_dir: Path,
    settings: SupervisorSettings,
    stop: threading.Event,
    start: Callable[[Path, str, str], subprocess.Popen[bytes]] = start_service,
    start_again: Callable[[ServerCommand], subprocess.Popen[bytes]] = start_server,
) -> None:
    """Watch and restart the services and servers of the stack in ``state_dir`` until
    ``stop`` is set or its state file is gone (``greenserve down`` removes it)."""
    watches: dict[str, _Watch] = {}
    children: list[subprocess.Popen[bytes]] = []
    while not stop.wait(settings.poll_s):
        children = [child for child in children if child.poll() is None]  # reaps them
        try:
            state = load_state(state_dir)
        except FileNotFoundError:
            logger.info("state file gone; supervisor ends")
            return
        except (ValueError, TypeError):
            continue  # mid-write by an older writer: read it again next time
        launches: list[tuple[dict[str, int], str, Launch]] = []
        for name in state.pids:
            module = state.modules.get(name)
            if module is not None:  # else recorded by an older ``up``: nothing to start
                launches.append((state.pids, name, partial(start, state_dir, name, module)))
        for name in state.server_pids:
            command = state.server_commands.get(name)
            if command is not None:  # else recorded by an older ``up``
                launches.append((state.server_pids, name, partial(start_again, command)))
        changed = False
        for pids, name, launch in launches:
            child = _tend(state, pids, name, watches.setdefault(name, _Watch()), settings, launch)
            if child is not None:
                children.append(child)
                changed = True
        if changed and (state_dir / STATE_FILE).exists():
            save_state(state_dir, state)


def _tend(
    state: StackState,
    pids: dict[str, int],
    name: str,
    watch: _Watch,
    settings: SupervisorSettings,
    launch: Launch,
) -> subprocess.Popen[bytes] | None:
    """Restart ``name`` if it has exited and its backoff has passed, recording the new
    PID in ``pids`` (``state.pids`` or ``state.server_pids``); return the new process."""
    pid = pids[name]
    now = time.monotonic()
    if alive(pid, state):
        if watch.in_a_row and now - watch.started_at >= settings.reset_after_s:
            watch.in_a_row = 0
        return None
    if watch.restart_at is None:
        watch.in_a_row += 1
        watch.restart_at = now + backoff_s(settings, watch.in_a_row)
        logger.warning(
            "%s (pid %d) exited; restarting in %.1f s (restart %d in a row)",
            name,
            pid,
            watch.restart_at - now,
            watch.in_a_row,
        )
    if now < watch.restart_at:
        return None
    child = launch()
    watch.restart_at, watch.started_at = None, time.monotonic()
    pids[name] = child.pid
    state.start_ticks.pop(str(pid), None)
    ticks = start_ticks(child.pid)
    if ticks is not None:
        state.start_ticks[str(child.pid)] = ticks
    state.restarts[name] = state.restarts.get(name, 0) + 1
    logger.warning("restarted %s as pid %d (%d restarts)", name, child.pid, state.restarts[name])
    return child


def start_supervisor(
    state_dir: Path, settings: SupervisorSettings | None = None
) -> subprocess.Popen[bytes]:
    """Start the supervisor process of the stack recorded in ``state_dir``."""
    log = (state_dir / "logs" / "supervisor.log").open("ab")
    args = (settings or SupervisorSettings()).as_args()
    try:
        return subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR_MODULE, "--state-dir", str(state_dir), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C on `greenserve up` is not meant for it
        )
    finally:
        log.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the supervisor process."""
    parser = argparse.ArgumentParser(prog=SUPERVISOR_MODULE, description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    defaults = SupervisorSettings()
    for f in dataclasses.fields(SupervisorSettings):
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", type=float, default=getattr(defaults, f.name)
        )
    args = parser.parse_args(argv)
    settings = SupervisorSettings(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(SupervisorSettings)}
    )
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s supervisor: %(message)s"
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    logger.info("supervising the stack in %s (%s)", args.state_dir, settings)
    supervise(args.state_dir, settings, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
