"""Starting a local stack's server again, as ``up`` started it, from the state file.

``up`` records each server it started (nats-server nodes, redis-server, a replica, the
Sentinels) as a :class:`~greenserve.local.state.ServerCommand`: the command line of
:class:`shared.servers.ServerProcess` (port, store directory, options), the working
directory and the log file. The supervisor runs it again when the server exits, so the
server comes back on its port with the JetStream store or append-only file it had.

A server's extra environment (``ServerProcess.env``; a NATS configuration may read a
password from it) is written to an owner-only file under ``<state_dir>/secrets`` with
:func:`shared.security.secrets.write_secret`, never into the state file. The servers
``up`` starts today take their secrets from owner-only files named on their command line,
so no such file is written for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import IO

from greenserve.local.state import ServerCommand
from shared.security.secrets import write_secret
from shared.servers import ServerProcess

__all__ = ["record_server", "start_server"]

ENV_DIR = Path("secrets") / "server-env"
"""Where, under the state dir, a server's extra environment is kept (owner-only)."""


def record_server(server: ServerProcess, state_dir: Path, cwd: Path) -> ServerCommand:
    """What starts ``server`` again: its command line, ``cwd`` (where it was started) and
    log file; its extra environment, if any, in an owner-only file under ``state_dir``.

    Raises:
        ValueError: ``server`` was started without a recorded command line.
    """
    if not server.args:
        raise ValueError(f"{server.name} was started without a recorded command line")
    env_file = None
    if server.env:
        path = state_dir / ENV_DIR / f"{server.name}.json"
        env_file = str(write_secret(path, json.dumps(dict(server.env))))
    return ServerCommand(
        args=list(server.args),
        cwd=str(cwd),
        log_file=str(server.log_file) if server.log_file is not None else None,
        env_file=env_file,
    )


def start_server(command: ServerCommand) -> subprocess.Popen[bytes]:
    """Run ``command`` again; it does not wait for the port (a server that cannot listen
    exits, and the supervisor's next look finds it gone and backs off)."""
    env = None
    if command.env_file is not None:
        extra: dict[str, str] = json.loads(Path(command.env_file).read_text(encoding="utf-8"))
        env = {**os.environ, **extra}
    with contextlib.ExitStack() as files:  # the child holds its own descriptor of the log
        log: IO[bytes] | int = subprocess.DEVNULL
        if command.log_file is not None:
            log = files.enter_context(Path(command.log_file).open("ab"))
        return subprocess.Popen(
            command.args,
            cwd=command.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a signal to the supervisor's group is not meant for it
        )
