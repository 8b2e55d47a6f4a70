"""Test fixtures: a real nats-server (JetStream) and redis-server on free ports per session.

The servers are started by the suite itself, never the machine's standard ones; every test
uses its own namespace (subject prefix, stream and Redis keys) so tests cannot hear each
other.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenserve.local import FORECASTER_CACHE_ENV
from services.forecaster.service import fit_cut, load_or_fit_regions
from services.forecaster.sources import CsvCarbonSource
from shared.config import ClockSettings
from shared.servers import ServerProcess, start_nats, start_redis

STACK_REGION_SETS = (("PJM",), ("PJM", "CISO"))
"""The region sets the suite's stacks forecast (``StackSpec.regions`` in the stack tests)."""


FORECASTER_CACHE = pytest.StashKey[Path]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Fit the stacks' forecasters once, into a cache every stack of the suite loads.

    Every stack's forecaster fits its regions at start-up on the history before the fixed
    model-time origin, so the fits of one region set are the same in every test. A stack
    that stops before its fit ends caches nothing, and the fit (25-40 CPU seconds for the
    sets above) ran beside the test on a 2-core runner; so when stack tests are selected the
    sets are fitted here once, with the service's own code. Here, after collection, and not
    in a fixture: a session fixture's set-up counts against the first test's timeout, and
    on a busy machine the fits outlasted it and every test of the run errored.
    """
    folder = Path(tempfile.mkdtemp(prefix="gs-forecaster-cache-"))
    session.config.stash[FORECASTER_CACHE] = folder
    stacks = any(item.get_closest_marker("connected") for item in session.items)
    if stacks and not session.config.option.collectonly:
        cut = fit_cut(ClockSettings().origin_model_s)
        for regions in STACK_REGION_SETS:
            histories = {region: CsvCarbonSource(region=region).load() for region in regions}
            for region, fitted in load_or_fit_regions(histories, "eia", cut, folder):
                if isinstance(fitted, ValueError):
                    raise pytest.UsageError(
                        f"forecaster fit for the stack tests: {region}: {fitted}"
                    )


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the fitted-forecaster cache."""
    folder = config.stash.get(FORECASTER_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def shared_forecaster_cache(request: pytest.FixtureRequest) -> Iterator[Path]:
    """The cache fitted after collection, named in the environment, so in-process settings
    and child processes both read it."""
    folder = request.config.stash[FORECASTER_CACHE]
    before = os.environ.get(FORECASTER_CACHE_ENV)
    os.environ[FORECASTER_CACHE_ENV] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(FORECASTER_CACHE_ENV, None)
        else:
            os.environ[FORECASTER_CACHE_ENV] = before


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
    """A redis-server (append-only file on, as ``greenserve up`` runs it), for the session."""
    server = start_redis(Path(tmp_path_factory.mktemp("redis")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace unique to one test."""
    return f"t{uuid.uuid4().hex[:10]}"
