"""The credentials file of the secure deployments: every password, random, owner-only.

``docker-compose.secure.yml`` requires one ``GS_NATS_PASSWORD_<USER>`` and one
``GS_REDIS_PASSWORD_<USER>`` per identity of :data:`shared.security.compose.COMPOSE_IDENTITIES`
(the servers load them, each service reads its own two from a Docker secret) and the
Grafana administrator's password; ``deploy/k8s`` builds its Secret from the same file. The
file is ``KEY=value`` lines, read by ``docker compose --env-file``, by a shell
(``set -a; . ./secure.env; set +a``) and by kustomize's ``secretGenerator`` alike: the
values are URL-safe base64, so no quoting is needed anywhere.

Neither server gets that file. Beside it go what they check passwords against:
``secure.nats-passwords.conf`` (for ``secure.env``), one bcrypt hash per NATS user as NATS
configuration variables that the generated ``nats.conf`` includes, and
``secure.redis-users.acl``, redis-server's ACL file: one ``user <name> on #<sha256> <rules>``
line per identity with the rules of :mod:`shared.security.redis_acl`. Neither server's
configuration nor its environment holds a password that would let whoever reads them act
as another service.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from proto.keys import Keys
from shared.security.compose import COMPOSE_IDENTITIES, COMPOSE_NAMESPACE
from shared.security.credentials import bcrypt_hash
from shared.security.identities import env_var_name
from shared.security.redis_acl import redis_acl_file
from shared.security.secrets import generate_password

__all__ = [
    "GRAFANA_ADMIN_PASSWORD",
    "NATS_HASHES_SUFFIX",
    "NATS_PASSWORD_PREFIX",
    "REDIS_PASSWORD_PREFIX",
    "REDIS_USERS_SUFFIX",
    "SecureEnvExistsError",
    "nats_hashes_path",
    "nats_hashes_text",
    "redis_users_path",
    "redis_users_text",
    "secure_env_names",
    "secure_env_text",
    "write_secure_env",
]

NATS_PASSWORD_PREFIX: Final = "GS_NATS_PASSWORD_"
REDIS_PASSWORD_PREFIX: Final = "GS_REDIS_PASSWORD_"
GRAFANA_ADMIN_PASSWORD: Final = "GS_GRAFANA_ADMIN_PASSWORD"
NATS_HASHES_SUFFIX: Final = ".nats-passwords.conf"
"""Suffix of the hashes file beside the credentials file (``secure.env`` →
``secure.nats-passwords.conf``), mounted as ``passwords.conf`` next to ``nats.conf``."""
REDIS_USERS_SUFFIX: Final = ".redis-users.acl"
"""Suffix of redis-server's ACL file beside the credentials file (``secure.env`` →
``secure.redis-users.acl``), which the deployments pass to ``--aclfile``."""


class SecureEnvExistsError(FileExistsError):
    """The credentials file is there already and overwriting it was not asked for."""


def secure_env_names() -> list[str]:
    """Every variable the secure deployments require, NATS users first, then Redis users."""
    names = [env_var_name(NATS_PASSWORD_PREFIX, i.user) for i in COMPOSE_IDENTITIES]
    names += [env_var_name(REDIS_PASSWORD_PREFIX, i.user) for i in COMPOSE_IDENTITIES]
    return [*names, GRAFANA_ADMIN_PASSWORD]


def secure_env_text(passwords: dict[str, str] | None = None) -> str:
    """A credentials file: ``passwords`` (variable → password), by default one new random
    password per variable of :func:`secure_env_names`."""
    if passwords is None:
        passwords = {name: generate_password() for name in secure_env_names()}
    header = (
        "# GreenServe secure-stack credentials (greenserve secrets). Keep this file private:\n"
        "# anyone who reads it can act as any service on the bus and in the store.\n"
    )
    return header + "".join(f"{name}={value}\n" for name, value in passwords.items())


def nats_hashes_text(passwords: dict[str, str]) -> str:
    """The NATS variables ``GS_NATS_PASSWORD_<USER>: "<bcrypt hash>"`` for every NATS
    password among ``passwords``: what ``nats.conf``'s ``include "passwords.conf"`` reads."""
    lines = [
        "# bcrypt hashes of the NATS passwords of the credentials file beside this one",
        "# (greenserve secrets); nats.conf includes it as passwords.conf. No password here.",
    ]
    lines += [
        f'{name}: "{bcrypt_hash(value)}"'
        for name, value in passwords.items()
        if name.startswith(NATS_PASSWORD_PREFIX)
    ]
    return "\n".join(lines) + "\n"


def nats_hashes_path(env_path: Path) -> Path:
    """Where the hashes of ``env_path``'s NATS passwords go: beside it, same stem."""
    return env_path.with_name(env_path.stem + NATS_HASHES_SUFFIX)


def redis_users_text(passwords: dict[str, str]) -> str:
    """redis-server's ACL file for ``passwords``: each identity's SHA-256 password hash and
    rules, the ``default`` user off.

    Raises:
        KeyError: ``passwords`` lacks an identity's ``GS_REDIS_PASSWORD_<USER>``.
    """
    users = [
        (identity, passwords[env_var_name(REDIS_PASSWORD_PREFIX, identity.user)])
        for identity in COMPOSE_IDENTITIES
    ]
    return redis_acl_file(Keys(COMPOSE_NAMESPACE), users)


def redis_users_path(env_path: Path) -> Path:
    """Where redis-server's ACL file for ``env_path``'s Redis passwords goes: beside it."""
    return env_path.with_name(env_path.stem + REDIS_USERS_SUFFIX)


def write_secure_env(path: Path, *, force: bool = False) -> Path:
    """Write a fresh credentials file at ``path``, and beside it the NATS hashes
    (:func:`nats_hashes_path`) and the Redis ACL file (:func:`redis_users_path`), all
    readable by their owner only.

    Raises:
        SecureEnvExistsError: any of the files exists and ``force`` is false (the running
            stack's passwords are in them: replacing them by mistake locks every service
            out); none is then written.
    """
    hashes, acl = nats_hashes_path(path), redis_users_path(path)
    if not force:
        for existing in (path, hashes, acl):
            if existing.exists():
                raise SecureEnvExistsError(f"{existing} exists; pass --force to replace it")
    passwords = {name: generate_password() for name in secure_env_names()}
    path.parent.mkdir(parents=True, exist_ok=True)
    # The credentials file last: a run stopped half-way leaves no passwords that the
    # servers' files do not match.
    _write_private(hashes, nats_hashes_text(passwords), force=force)
    _write_private(acl, redis_users_text(passwords), force=force)
    _write_private(path, secure_env_text(passwords), force=force)
    return path


def _write_private(path: Path, text: str, *, force: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError as exc:
        raise SecureEnvExistsError(f"{path} exists; pass --force to replace it") from exc
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # a file replaced with --force keeps its old mode through O_CREAT
