"""Credentials of a secure stack: a password per identity, as files and as settings.

Each identity gets one NATS and one Redis password. They are written owner-only under the
stack's state directory; a service's settings name the files (``password_file``), never the
passwords, so the per-service YAML configs and logs hold no secret.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import bcrypt

from shared.security.identities import Identity, env_var_name
from shared.security.nats_acl import NATS_PASSWORD_ENV_PREFIX
from shared.security.secrets import generate_password, write_secret

__all__ = [
    "BCRYPT_ROUNDS",
    "Credential",
    "SecretFiles",
    "bcrypt_hash",
    "by_user",
    "issue_credentials",
    "nats_password_env",
    "nats_quoted",
    "service_overrides",
    "write_credentials",
]


BCRYPT_ROUNDS: Final = 10
"""bcrypt cost (log2 of the iterations) of the NATS password hashes. nats-server checks
the hash on every connect and the work doubles per round; the passwords carry 192 random
bits (``generate_password``), so no cost is needed against brute force, and a higher one
would only slow every (re)connect of every service."""


def bcrypt_hash(password: str, rounds: int = BCRYPT_ROUNDS) -> str:
    """The ``$2b$`` bcrypt hash nats-server accepts as a user's ``password``."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds)).decode()


@dataclass(frozen=True, slots=True)
class Credential:
    """One identity's passwords (the repr hides them)."""

    identity: Identity
    nats_password: str
    redis_password: str

    def __repr__(self) -> str:
        return f"Credential(identity={self.identity!r}, passwords=***)"


@dataclass(frozen=True, slots=True)
class SecretFiles:
    """Where one identity's passwords were written."""

    nats_password_file: Path
    redis_password_file: Path


def issue_credentials(identities: Sequence[Identity]) -> list[Credential]:
    """Fresh random passwords for every identity.

    Raises:
        ValueError: two identities share a user name.
    """
    users = [i.user for i in identities]
    if len(set(users)) != len(users):
        raise ValueError(f"duplicate user names in {users}")
    return [Credential(i, generate_password(), generate_password()) for i in identities]


def write_credentials(credentials: Sequence[Credential], folder: Path) -> dict[str, SecretFiles]:
    """Write each password to its own owner-only file; return the files by user name."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    files: dict[str, SecretFiles] = {}
    for cred in credentials:
        user = cred.identity.user
        files[user] = SecretFiles(
            write_secret(folder / f"nats-{user}", cred.nats_password),
            write_secret(folder / f"redis-{user}", cred.redis_password),
        )
    return files


def nats_password_env(credentials: Sequence[Credential]) -> dict[str, str]:
    """The environment nats-server needs to resolve the passwords of its config file.

    nats-server parses a variable's value as configuration, so an unquoted password that
    starts with a digit would be read as a number; each value is therefore a quoted string.
    """
    return {
        env_var_name(NATS_PASSWORD_ENV_PREFIX, c.identity.user): nats_quoted(c.nats_password)
        for c in credentials
    }


def nats_quoted(secret: str) -> str:
    """``secret`` as a quoted nats-server configuration string."""
    return '"' + secret.replace("\\", "\\\\").replace('"', '\\"') + '"'


def service_overrides(
    identity: Identity, files: SecretFiles, *, tls_ca_file: Path | None = None
) -> dict[str, Any]:
    """Settings sections that make a service connect as ``identity`` (no secret inline)."""
    nats: dict[str, Any] = {
        "user": identity.user,
        "password_file": str(files.nats_password_file),
        "inbox_prefix": identity.inbox_prefix,
    }
    redis: dict[str, Any] = {
        "username": identity.user,
        "password_file": str(files.redis_password_file),
    }
    if tls_ca_file is not None:
        nats["tls_ca_file"] = str(tls_ca_file)
        redis["tls_ca_file"] = str(tls_ca_file)
    return {"nats": nats, "redis": redis}


def by_user(credentials: Sequence[Credential]) -> Mapping[str, Credential]:
    """Credentials indexed by user name."""
    return {c.identity.user: c for c in credentials}
