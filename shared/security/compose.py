"""The secure compose stack's identities and its committed NATS configuration.

``docker-compose.secure.yml`` mounts ``docker/secure/nats.conf`` (users and subject
permissions; passwords are ``$GS_NATS_PASSWORD_<USER>`` variables, defined as bcrypt hashes
by the ``passwords.conf`` it includes, which ``greenserve secrets`` writes). Regenerate it
after a fleet or protocol change with ``python -m shared.security.compose docker/secure``;
``tests/unit/deploy/test_compose.py`` fails while it is stale. Redis has no committed file:
its ACL file pairs every rule with a password hash, so ``greenserve secrets`` writes it
whole beside the credentials (``greenserve.secure_env``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from proto.subjects import Subjects
from shared.security.identities import Identity
from shared.security.nats_acl import nats_server_config

__all__ = [
    "COMPOSE_IDENTITIES",
    "COMPOSE_NAMESPACE",
    "NATS_CONF",
    "NATS_PASSWORDS_INCLUDE",
    "compose_files",
    "main",
]

COMPOSE_NAMESPACE = "gs"
NATS_CONF = "nats.conf"

COMPOSE_IDENTITIES = (
    Identity("scheduler", "scheduler"),
    Identity("router", "router"),
    Identity("planner", "planner"),
    Identity("forecaster", "forecaster"),
    Identity("classifier", "classifier"),
    Identity("worker-0", "worker", "worker-0", "node-0"),
    Identity("worker-1", "worker", "worker-1", "node-0"),
    Identity("worker-vllm", "worker", "worker-vllm-0", "node-0"),
    Identity("dvfs", "dvfs", "node-0"),
    Identity("gateway", "gateway"),
    Identity("loadgen", "loadgen"),
    Identity("monitor", "monitor"),
    Identity("admin", "admin"),
)
"""One identity per compose service (user = service name) plus the tool identities."""


NATS_PASSWORDS_INCLUDE = "passwords.conf"
"""What the deployments mount beside ``nats.conf``: the hashes ``greenserve secrets`` wrote."""


def compose_files() -> dict[str, str]:
    """File name → content of the secure compose stack's server configuration."""
    nats = nats_server_config(Subjects(COMPOSE_NAMESPACE), COMPOSE_IDENTITIES)
    header, _, body = nats.partition("\n")
    # The variables the users' passwords name are bcrypt hashes defined in the included
    # file, so the server's environment holds no password (a missing file stops the server).
    include = f'include "{NATS_PASSWORDS_INCLUDE}"\n'
    return {NATS_CONF: f"{header}\n{include}{body}"}


def main(argv: list[str] | None = None) -> int:
    """Write the files into the folder named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    for name, text in compose_files().items():
        (args.folder / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
