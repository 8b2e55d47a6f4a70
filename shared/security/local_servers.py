"""A secured nats-server and redis-server for one local stack (``greenserve up --secure``).

Makes the state dir owner-only (0700), issues a password per identity (the stack's processes
plus the ``loadgen``, ``monitor`` and ``admin`` tool identities), writes them owner-only
under ``<state_dir>/secrets``, generates the NATS configuration and the Redis ACL file from
the stack's namespace, optionally a local CA for TLS, and starts both servers. It returns,
per process, the settings that make it connect as itself, and the URLs the command-line
tools use.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proto.keys import Keys
from proto.subjects import Subjects
from shared.security.api_keys import issue_api_key
from shared.security.credentials import (
    Credential,
    SecretFiles,
    bcrypt_hash,
    by_user,
    issue_credentials,
    service_overrides,
    write_credentials,
)
from shared.security.identities import Identity
from shared.security.nats_acl import nats_server_config
from shared.security.redis_acl import redis_acl_file
from shared.security.secrets import url_with_user, write_secret
from shared.security.tls import TlsFiles, make_local_ca
from shared.servers import ServerProcess, start_nats, start_redis

__all__ = ["TOOL_IDENTITIES", "SecureServers", "start_secure_servers"]

TOOL_IDENTITIES = (
    Identity("loadgen", "loadgen"),
    Identity("monitor", "monitor"),
    Identity("admin", "admin"),
)
"""Identities of the command-line tools: replay, status, and the operator."""


@dataclass(slots=True)
class SecureServers:
    """The started servers and how each party connects to them."""

    servers: list[ServerProcess]
    """nats-server first, then redis-server."""
    overrides: dict[str, dict[str, Any]]
    """Settings sections per process name (user, password file, inbox, CA)."""
    credentials: list[Credential]
    tls: TlsFiles | None
    tool_nats_url: str
    """NATS URL carrying the loadgen identity (for ``greenserve replay``)."""
    tool_redis_url: str
    """Redis URL carrying the monitor identity (for ``greenserve status``)."""
    api_key_file: Path | None = None
    """The HTTP API's key (``Authorization: Bearer``), when the stack has a gateway."""
    admin_files: SecretFiles | None = None
    """The ``admin`` identity's password files: what ``greenserve down`` connects with to
    read and clear the queues, which loadgen and monitor may not touch."""


def start_secure_servers(
    identities: Sequence[Identity], namespace: str, state_dir: Path, *, tls: bool = False
) -> SecureServers:
    """Generate credentials and configurations, then start NATS and Redis with them.

    Raises:
        RuntimeError: ``tls`` without the ``cryptography`` package, or a server failed.
    """
    # The state dir holds the service logs, the JetStream store (queued prompts), the
    # state file, the secrets and the TLS key: owner-only, also when it existed before.
    state_dir.mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o700)
    everyone = [*identities, *TOOL_IDENTITIES]
    credentials = issue_credentials(everyone)
    files = write_credentials(credentials, state_dir / "secrets")
    tls_files = make_local_ca(state_dir / "tls") if tls else None
    nats_dir, redis_dir = state_dir / "nats", state_dir / "redis"
    # A stack we start owns its server: an earlier run's stored requests must not come back.
    shutil.rmtree(nats_dir / "jetstream", ignore_errors=True)
    shutil.rmtree(redis_dir / "appendonlydir", ignore_errors=True)  # nor its queues (AOF)
    nats_dir.mkdir(parents=True, exist_ok=True)
    # bcrypt hashes in the (owner-only) file: the server's environment holds no password.
    hashes = {c.identity.user: bcrypt_hash(c.nats_password) for c in credentials}
    config = nats_server_config(
        Subjects(namespace), everyone, tls=tls_files, password_hashes=hashes
    )
    nats_conf = write_secret(nats_dir / "nats.conf", config)
    acl = redis_acl_file(Keys(namespace), [(c.identity, c.redis_password) for c in credentials])
    aclfile = write_secret(redis_dir / "users.acl", acl)
    servers = [start_nats(nats_dir, config_file=nats_conf, tls=tls)]
    try:
        servers.append(start_redis(redis_dir, aclfile=aclfile, tls=tls_files))
    except BaseException:
        servers[0].stop()
        raise
    ca = tls_files.ca_file if tls_files else None
    overrides = {i.user: service_overrides(i, files[i.user], tls_ca_file=ca) for i in identities}
    # A secured stack's HTTP API asks for a key too (docs/security.md, The HTTP API).
    gateways = [i.user for i in identities if i.role == "gateway"]
    key_file, keys_file = issue_api_key(state_dir / "secrets") if gateways else (None, None)
    for user in gateways:
        overrides[user]["gateway"] = {"api_keys_file": str(keys_file)}
    creds = by_user(credentials)
    loadgen, monitor = creds["loadgen"], creds["monitor"]
    return SecureServers(
        servers=servers,
        overrides=overrides,
        credentials=credentials,
        tls=tls_files,
        tool_nats_url=url_with_user(servers[0].url, "loadgen", loadgen.nats_password),
        tool_redis_url=url_with_user(f"{servers[1].url}/0", "monitor", monitor.redis_password),
        api_key_file=key_file,
        admin_files=files["admin"],
    )
