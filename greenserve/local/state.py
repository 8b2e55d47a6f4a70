"""The state file of a local stack: what ``greenserve up`` started, for other shells.

``<state_dir>/stack.json`` lets ``greenserve down``/``status``/``replay`` find a stack that
another shell started; it holds the stack's URLs (with credentials when secured), so it is
written owner-only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["DEFAULT_STATE_DIR", "STATE_FILE", "ServerCommand", "StackState", "load_state"]

DEFAULT_STATE_DIR = Path(".greenserve")
STATE_FILE = "stack.json"


@dataclass(slots=True)
class ServerCommand:
    """How to start a server of the stack again exactly as ``up`` started it: the same
    command line keeps its port, its store (JetStream directory, Redis append-only file)
    and its options (``greenserve.local.server_commands``)."""

    args: list[str]
    cwd: str
    """The directory it was started in (its paths are absolute; this is for the rest)."""
    log_file: str | None = None
    """Where its standard output goes (``None``: discarded; it logs by its own option)."""
    env_file: str | None = None
    """Owner-only JSON file of what its environment had on top of the inherited one; only
    where it had anything, so a password there never lands in this state file."""


@dataclass(slots=True)
class StackState:
    """What ``greenserve up`` started (JSON in the state dir)."""

    namespace: str
    nats_url: str
    """One server's URL or a cluster's comma list."""
    redis_url: str
    """The Redis (with Sentinels: the primary as started; a failover moves it)."""
    speedup: float
    origin_wall_s: float
    model: str
    workers: int
    pids: dict[str, int] = field(default_factory=dict)
    server_pids: dict[str, int] = field(default_factory=dict)
    secure: bool = False
    """Started with ``--secure``: the URLs carry the loadgen (NATS) and monitor (Redis)
    identities, so ``replay`` and ``status`` work unchanged; the file is owner-only."""
    admin_nats_password_file: str | None = None
    """A ``--secure`` stack's ``admin`` NATS password file: ``down`` reads and clears the
    ingress stream as admin (loadgen may not), and answers the requests it finds."""
    admin_redis_password_file: str | None = None
    """Its ``admin`` Redis password file: ``down`` reads and clears ``queued`` and
    ``dispatched`` as admin (monitor may not)."""
    tls_ca_file: str | None = None
    """CA of the servers' certificates when started with ``--tls``."""
    gateway_url: str | None = None
    """Base URL of the OpenAI-compatible HTTP ingress (``…/v1/completions``)."""
    cells: list[str] = field(default_factory=list)
    """State dirs of the further cells started with this one (``greenserve up --cells``), on
    this one's servers; ``stop_state`` stops them first."""
    modules: dict[str, str] = field(default_factory=dict)
    """The module each service process runs (``python -m``), by name: what the supervisor
    starts again, on the settings file in ``<state_dir>/config/<name>.yaml``."""
    server_commands: dict[str, ServerCommand] = field(default_factory=dict)
    """How to start each server of ``server_pids`` again, by name: what the supervisor
    runs when one exits. Only servers this stack started are here, never one given by URL."""
    restarts: dict[str, int] = field(default_factory=dict)
    """Times the supervisor started each service or server again after it exited."""
    supervisor_pid: int | None = None
    """The supervisor process (``greenserve.local.supervisor``); ``None``: unsupervised.
    Stopped before the services, so that their stop is not taken for a crash."""
    models: list[str] = field(default_factory=list)
    """The models served (``--models``); empty (one model, or an older state file): ``model``."""
    metrics: dict[str, str] = field(default_factory=dict)
    """Each service process's Prometheus ``/metrics`` URL, by name."""
    metrics_targets_file: str | None = None
    """The stack's Prometheus file-service-discovery file (``file_sd_configs``)."""
    nats_replicas: int = 1
    """Replicas of each JetStream resource (``--nats-cluster``: min(3, nodes))."""
    redis_sentinels: list[str] = field(default_factory=list)
    """``host:port`` of the Sentinels (``--redis-sentinel``); clients ask them for the
    primary. Empty: ``redis_url`` is the one Redis."""
    redis_master_name: str = "greenserve"
    start_ticks: dict[str, int] = field(default_factory=dict)
    """Start time of each process (``/proc/<pid>/stat``, clock ticks since boot) by PID: a
    PID that names another process now (the stack crashed, the machine rebooted) is not
    this stack's, so ``down`` does not signal it and ``up`` does not take it for running.
    Empty where ``/proc`` is not (the PIDs are then trusted) and in older state files."""

    @property
    def served_models(self) -> tuple[str, ...]:
        """The models the stack serves (what a replay asks for, in turn)."""
        return tuple(self.models) or (self.model,)

    def redis_client(
        self, *, connect_timeout_s: float = 2.0, read_timeout_s: float | None = None
    ) -> Redis:
        """A client of the stack's Redis as recorded (a ``--tls`` stack's certificate is of
        its own CA); ``read_timeout_s`` None waits for replies as long as they take."""
        from redis.asyncio import Redis  # a CLI that never reads Redis need not import it

        if self.redis_sentinels:
            from shared.config import RedisSettings
            from shared.store import connect_redis

            # Wherever the Sentinels say the primary is now, not where it was started.
            return connect_redis(
                RedisSettings(
                    url=self.redis_url,
                    socket_timeout_s=read_timeout_s or connect_timeout_s,
                    sentinels=tuple(self.redis_sentinels),
                    master_name=self.redis_master_name,
                )
            )
        # Only a TLS connection takes a CA: a plain one refuses the keyword.
        tls: dict[str, Any] = {"ssl_ca_certs": self.tls_ca_file} if self.tls_ca_file else {}
        return Redis.from_url(
            self.redis_url,
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=read_timeout_s,
            **tls,
        )


def load_state(state_dir: Path = DEFAULT_STATE_DIR) -> StackState:
    """Read the state file of a stack started by ``greenserve up``.

    Raises:
        FileNotFoundError: no stack is recorded there.
    """
    path = state_dir / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"no running stack recorded in {path}; start one with `greenserve up`"
        )
    fields = json.loads(path.read_text())
    commands = fields.pop("server_commands", None) or {}
    return StackState(
        **fields, server_commands={name: ServerCommand(**c) for name, c in commands.items()}
    )
