"""Test fixtures: a real nats-server (JetStream) and redis-server on free ports per session.

The servers are started by the suite itself, never the machine's standard ones; every test
uses its own namespace (subject prefix, stream and Redis keys) so tests cannot hear each
other.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.servers import ServerProcess, start_nats, start_redis


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A nats-server with JetStream, for the whole session."""
    server = start_nats(Path(tmp_path_factory.mktemp("nats")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A redis-server without persistence, for the whole session."""
    server = start_redis(Path(tmp_path_factory.mktemp("redis")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace unique to one test."""
    return f"t{uuid.uuid4().hex[:10]}"
