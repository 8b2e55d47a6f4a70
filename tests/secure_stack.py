"""A secured nats-server and redis-server for tests, and a watch on what they refuse.

Both servers are started with the configuration generated for the stack's namespace
(``shared.security``), exactly as ``greenserve up --secure`` starts them; each service
launch connects as its own identity with its own password files.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import nats
from nats.aio.client import Client
from pydantic import SecretStr

from greenserve.stack import ServiceLaunch, StackSpec, identity_for, stack_launches, with_settings
from shared.config import NatsSettings, RedisSettings
from shared.security.credentials import Credential, by_user
from shared.security.identities import Identity
from shared.security.local_servers import SecureServers, start_secure_servers

__all__ = ["SecureStack", "Violations", "connect_watched", "secure_stack"]


class SecureStack:
    """Servers, credentials and service launches of one secure stack."""

    def __init__(self, secured: SecureServers, launches: list[ServiceLaunch], namespace: str):
        self.secured = secured
        self.launches = launches
        self.namespace = namespace
        self.creds: dict[str, Credential] = dict(by_user(secured.credentials))

    @property
    def nats_url(self) -> str:
        return self.secured.servers[0].url

    @property
    def redis_url(self) -> str:
        return self.secured.servers[1].url

    def nats_settings(self, user: str) -> NatsSettings:
        return NatsSettings(
            url=self.nats_url,
            user=user,
            password=SecretStr(self.creds[user].nats_password),
            request_timeout_s=1.0,
            max_reconnect_attempts=0,
        )

    def redis_settings(self, user: str) -> RedisSettings:
        return RedisSettings(
            url=self.redis_url,
            username=user,
            password=SecretStr(self.creds[user].redis_password),
        )

    def nats_violations(self, users: set[str]) -> list[str]:
        """Lines of the nats-server log that refused one of ``users``."""
        log = (self.secured.servers[0].workdir / "nats.log").read_text()
        return [
            line
            for line in log.splitlines()
            if "Violation" in line and any(f'user:{u}"' in line for u in users)
        ]


@contextmanager
def secure_stack(
    spec: StackSpec, state_dir: Path, extra_identities: Sequence[Identity] = ()
) -> Iterator[SecureStack]:
    """Start secured servers for ``spec``'s processes (plus ``extra_identities``).

    ``spec``'s URLs are replaced by the servers'; the launches carry each process's identity.
    """
    identities = [identity_for(launch) for launch in stack_launches(spec)]
    secured = start_secure_servers([*identities, *extra_identities], spec.namespace, state_dir)
    try:
        at = replace(spec, nats_url=secured.servers[0].url, redis_url=secured.servers[1].url)
        launches = with_settings(stack_launches(at), secured.overrides)
        yield SecureStack(secured, launches, spec.namespace)
    finally:
        for server in secured.servers:
            server.stop()


class Violations:
    """Collects the errors the server sends a connection (permission violations)."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    async def record(self, exc: Exception) -> None:
        self.messages.append(str(exc))

    async def wait_for(self, text: str, timeout_s: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in m.lower() for m in self.messages):
                return True
            await asyncio.sleep(0.05)
        return False


async def connect_watched(settings: NatsSettings) -> tuple[Client, Violations]:
    """Connect as ``settings.user`` and record every error the server sends."""
    violations = Violations()
    nc = await nats.connect(
        settings.url,
        user=settings.user,
        password=settings.password.get_secret_value() if settings.password else None,
        inbox_prefix=f"_INBOX.{settings.user}",
        error_cb=violations.record,
        max_reconnect_attempts=0,
    )
    return nc, violations
