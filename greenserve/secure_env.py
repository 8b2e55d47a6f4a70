"""The credentials file of the secure deployments: every password, random, owner-only.

``docker-compose.secure.yml`` requires one ``GS_NATS_PASSWORD_<USER>`` and one
``GS_REDIS_PASSWORD_<USER>`` per identity of :data:`shared.security.compose.COMPOSE_IDENTITIES`
(the servers load them, each service reads its own two from a Docker secret) and the
Grafana administrator's password; ``deploy/k8s`` builds its Secret from the same file. The
file is ``KEY=value`` lines, read by ``docker compose --env-file``, by a shell
(``set -a; . ./secure.env; set +a``) and by kustomize's ``secretGenerator`` alike: the
values are URL-safe base64, so no quoting is needed anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from shared.security.compose import COMPOSE_IDENTITIES
from shared.security.identities import env_var_name
from shared.security.secrets import generate_password

__all__ = [
    "GRAFANA_ADMIN_PASSWORD",
    "NATS_PASSWORD_PREFIX",
    "REDIS_PASSWORD_PREFIX",
    "SecureEnvExistsError",
    "secure_env_names",
    "secure_env_text",
    "write_secure_env",
]

NATS_PASSWORD_PREFIX: Final = "GS_NATS_PASSWORD_"
REDIS_PASSWORD_PREFIX: Final = "GS_REDIS_PASSWORD_"
GRAFANA_ADMIN_PASSWORD: Final = "GS_GRAFANA_ADMIN_PASSWORD"


class SecureEnvExistsError(FileExistsError):
    """The credentials file is there already and overwriting it was not asked for."""


def secure_env_names() -> list[str]:
    """Every variable the secure deployments require, NATS users first, then Redis users."""
    names = [env_var_name(NATS_PASSWORD_PREFIX, i.user) for i in COMPOSE_IDENTITIES]
    names += [env_var_name(REDIS_PASSWORD_PREFIX, i.user) for i in COMPOSE_IDENTITIES]
    return [*names, GRAFANA_ADMIN_PASSWORD]


def secure_env_text() -> str:
    """A fresh credentials file: one new random password per variable."""
    header = (
        "# GreenServe secure-stack credentials (greenserve secrets). Keep this file private:\n"
        "# anyone who reads it can act as any service on the bus and in the store.\n"
    )
    return header + "".join(f"{name}={generate_password()}\n" for name in secure_env_names())


def write_secure_env(path: Path, *, force: bool = False) -> Path:
    """Write a fresh credentials file at ``path``, readable by its owner only.

    Raises:
        SecureEnvExistsError: ``path`` exists and ``force`` is false (the running stack's
            passwords are in it: replacing them by mistake locks every service out).
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError as exc:
        raise SecureEnvExistsError(f"{path} exists; pass --force to replace it") from exc
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secure_env_text())
    os.chmod(path, 0o600)  # a file replaced with --force keeps its old mode through O_CREAT
    return path
