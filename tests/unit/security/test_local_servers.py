"""File modes of what ``greenserve up --secure`` writes (servers replaced by stand-ins)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.security import local_servers
from shared.security.identities import Identity
from shared.servers import ServerProcess


def _fake_server(name: str, port: int) -> Any:
    def start(workdir: Path, *_args: Any, **_kwargs: Any) -> ServerProcess:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / f"{name}.log").write_text("started\n")  # as the real servers log there
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        return ServerProcess(name, port, proc, workdir)

    return start


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_secure_state_dir_is_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that the state dir of a secured stack is 0700 and its secrets 0600.

    It holds the service logs, the JetStream store (the queued prompts), the server
    configurations and the TLS folder; created with the umask's 0755 (and an existing dir
    kept as it was), any local user could read them.
    """
    monkeypatch.setattr(local_servers, "start_nats", _fake_server("nats", 4222))
    monkeypatch.setattr(local_servers, "start_redis", _fake_server("redis", 6379))
    fresh, existing = tmp_path / "fresh", tmp_path / "existing"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    for state_dir in (fresh, existing):
        secured = local_servers.start_secure_servers(
            [Identity("scheduler", "scheduler")], "gs", state_dir
        )
        assert _mode(state_dir) == 0o700
        assert _mode(state_dir / "secrets") == 0o700
        for path in (state_dir / "secrets").iterdir():
            assert _mode(path) == 0o600, path
        assert _mode(state_dir / "redis" / "users.acl") == 0o600
        password = secured.credentials[0].nats_password
        assert password not in (state_dir / "nats" / "nats.conf").read_text()


def test_status_reads_a_tls_stack_with_its_own_ca(tmp_path: Path) -> None:
    """Test that ``greenserve status`` of an ``up --secure --tls`` stack trusts the stack's CA.

    It connected without the CA recorded in the state file, so the local CA's certificate
    failed verification and status showed ``redis unreachable`` unless the operator exported
    SSL_CERT_FILE. The output must not show a password either.
    """
    import asyncio
    import shutil

    from greenserve.commands._status_report import _read
    from greenserve.local import StackState
    from shared.security.tls import tls_available

    if not tls_available() or not shutil.which("nats-server") or not shutil.which("redis-server"):
        pytest.skip("needs cryptography, nats-server and redis-server")
    secured = local_servers.start_secure_servers(
        [Identity("scheduler", "scheduler")], "gs", tmp_path / "state", tls=True
    )
    try:
        assert secured.tls is not None
        state = StackState(
            namespace="gs",
            nats_url=secured.tool_nats_url,
            redis_url=secured.tool_redis_url,
            speedup=1.0,
            origin_wall_s=0.0,
            model="m",
            workers=0,
            pids={},
            server_pids={},
            secure=True,
            tls_ca_file=str(secured.tls.ca_file),
        )
        report = asyncio.run(_read(state))
        assert report == {"workers": [], "plan": None}
        for cred in secured.credentials:
            assert cred.redis_password not in repr(report)
    finally:
        for server in secured.servers:
            server.stop()
