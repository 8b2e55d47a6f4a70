"""``greenserve secrets``: generate the credentials file of the secure deployments.

One random password per NATS and Redis identity of ``docker-compose.secure.yml`` plus the
Grafana administrator's, written owner-only (0600) as ``KEY=value`` lines that
``docker compose --env-file`` and ``deploy/k8s``'s Secret read, and beside it what the
servers check them against: nats-server's bcrypt hashes (``secure.nats-passwords.conf``)
and redis-server's ACL file of SHA-256 hashes and rules (``secure.redis-users.acl``).
Existing files are kept unless ``--force`` is given: they hold the passwords a running
stack was started with.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "secrets"
HELP = "generate every password the secure compose file and the Kubernetes Secret need"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Where to write, and whether an existing file may be replaced."""
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("secure.env"),
        help="file to write (created 0600; default: secure.env)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an existing file (new passwords)"
    )


def run(args: argparse.Namespace) -> int:
    """Write the file; exit 1 with one line when it exists and --force was not given."""
    # Imported here: the identities bring the protocol modules, which --help does not need.
    from greenserve.secure_env import (
        SecureEnvExistsError,
        nats_hashes_path,
        redis_users_path,
        secure_env_names,
        write_secure_env,
    )

    try:
        path = write_secure_env(args.out, force=args.force)
    except SecureEnvExistsError as exc:
        print(f"greenserve secrets: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(secure_env_names())} passwords to {path} (mode 0600)", file=sys.stderr)
    print(f"wrote nats-server's password hashes to {nats_hashes_path(path)}", file=sys.stderr)
    print(f"wrote redis-server's ACL file to {redis_users_path(path)}", file=sys.stderr)
    return 0
