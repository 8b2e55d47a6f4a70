"""The NATS and Redis servers a local stack runs on: started for it, or given by URL.

A secured stack (``--secure``) starts both servers with per-service users and
permissions (``shared.security.local_servers``); otherwise each server is started unless
its URL is given.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from greenserve.stack import CLOCK_AGENT_MODULE, StackSpec, identity_for, stack_launches
from shared.security.local_servers import SecureServers, start_secure_servers
from shared.servers import ServerProcess, start_nats, start_redis

__all__ = ["StackServers", "start_servers"]


@dataclass(slots=True)
class StackServers:
    """The servers of one stack: their URLs and the ones started for it."""

    nats_url: str
    """What the stack's services connect to."""
    redis_url: str
    started: list[ServerProcess] = field(default_factory=list)
    """The servers started for this stack (none where both URLs were given); it owns them."""
    secured: SecureServers | None = None
    """Users, permissions (and CA) of a ``--secure`` stack's servers."""

    @property
    def tool_nats_url(self) -> str:
        """What the tools (``replay``) connect to: a secured stack's loadgen identity."""
        return self.secured.tool_nats_url if self.secured else self.nats_url

    @property
    def tool_redis_url(self) -> str:
        """What the tools (``status``) connect to: a secured stack's monitor identity."""
        return self.secured.tool_redis_url if self.secured else self.redis_url

    def stop(self) -> None:
        """Stop the servers started for this stack."""
        for server in self.started:
            server.stop()


def start_servers(
    spec: StackSpec,
    state_dir: Path,
    *,
    nats_url: str | None = None,
    redis_url: str | None = None,
    secure: bool = False,
    tls: bool = False,
) -> StackServers:
    """Start the servers ``spec``'s processes need (each one unless its URL is given) in
    ``state_dir``; those started so far are stopped again if one fails to start.

    ``secure`` starts both, with an identity for each process of ``spec`` and, with
    ``tls``, certificates of a local CA; it takes no URLs (the caller checks).
    """
    started: list[ServerProcess] = []
    secured: SecureServers | None = None
    try:
        if secure:
            identities = [
                identity_for(launch)
                for launch in stack_launches(spec)
                if launch.module != CLOCK_AGENT_MODULE  # no bus, so no bus identity
            ]
            secured = start_secure_servers(identities, spec.namespace, state_dir, tls=tls)
            started += secured.servers
            nats_url, redis_url = secured.servers[0].url, secured.servers[1].url
        if nats_url is None:
            # A stack we start owns its server: begin with an empty JetStream store, so no
            # request of an earlier run is redelivered to a client that is long gone.
            shutil.rmtree(state_dir / "nats", ignore_errors=True)
            started.append(start_nats(state_dir / "nats"))
            nats_url = started[-1].url
        if redis_url is None:
            # Likewise an empty Redis: its append-only file would bring back an earlier
            # run's queues (``start_redis`` keeps one so that a restart in a run does).
            shutil.rmtree(state_dir / "redis", ignore_errors=True)
            started.append(start_redis(state_dir / "redis"))
            redis_url = started[-1].url
    except BaseException:
        for server in started:
            server.stop()
        raise
    return StackServers(nats_url, redis_url, started, secured)
