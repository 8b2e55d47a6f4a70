"""``run_in_process`` leaves no service task behind when it returns."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import types
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

import greenserve.runner as runner
from greenserve.runner import run_in_process
from greenserve.stack import ServiceLaunch
from shared.config import Settings


async def test_a_service_that_ignores_stop_is_cancelled_and_awaited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that a service still running when the stop wait runs out is cancelled *and*
    waited for: only cancelled, it went on past the block (its NATS and Redis connections
    still open), and a test's event loop then closed over it ("Task was destroyed but it is
    pending")."""
    closed: list[str] = []

    @contextlib.asynccontextmanager
    async def context(name: str, settings: Settings) -> AsyncIterator[Any]:
        try:
            yield SimpleNamespace(stop=asyncio.Event())
        finally:
            closed.append(name)  # where the real context drains NATS and closes Redis

    async def serve(ctx: Any) -> None:
        await asyncio.sleep(3600)  # deaf to ctx.stop

    module = types.ModuleType("stubborn.service")
    module.serve = serve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "stubborn.service", module)
    monkeypatch.setattr(runner, "service_context", context)
    monkeypatch.setattr(runner, "STOP_TIMEOUT_S", 0.2)
    async with run_in_process([ServiceLaunch("stubborn", "stubborn", Settings())]) as running:
        task = running["stubborn"].task
    assert task.done()
    assert closed == ["stubborn"]
