"""``run_in_process`` leaves no service task behind when it returns, and loses no failure."""

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


def _failing_services(monkeypatch: pytest.MonkeyPatch, errors: dict[str, Exception]) -> None:
    """Services named in ``errors`` raise theirs once stopped; the others stop cleanly."""

    @contextlib.asynccontextmanager
    async def context(name: str, settings: Settings) -> AsyncIterator[Any]:
        yield SimpleNamespace(stop=asyncio.Event(), name=name)

    async def serve(ctx: Any) -> None:
        await ctx.stop.wait()
        if ctx.name in errors:
            raise errors[ctx.name]

    module = types.ModuleType("failing.service")
    module.serve = serve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "failing.service", module)
    monkeypatch.setattr(runner, "service_context", context)


def _launches(*names: str) -> list[ServiceLaunch]:
    return [ServiceLaunch(name, "failing", Settings()) for name in names]


async def test_one_failed_service_is_raised_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    _failing_services(monkeypatch, {"b": RuntimeError("b broke")})
    with pytest.raises(RuntimeError, match="b broke"):
        async with run_in_process(_launches("a", "b", "c")):
            pass


async def test_every_failed_service_is_raised_not_only_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that two failures reach the caller together: the second one was dropped."""
    _failing_services(monkeypatch, {"a": RuntimeError("a broke"), "c": KeyError("c")})
    with pytest.raises(ExceptionGroup) as caught:
        async with run_in_process(_launches("a", "b", "c")):
            pass
    assert [repr(e) for e in caught.value.exceptions] == [
        repr(RuntimeError("a broke")),
        repr(KeyError("c")),
    ]
    assert "a, c" in str(caught.value)


async def test_the_blocks_own_error_goes_on_with_the_services_noted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that a failing service neither replaces nor hides the block's exception."""
    _failing_services(monkeypatch, {"b": RuntimeError("b broke")})
    with pytest.raises(AssertionError, match="the test's own") as caught:
        async with run_in_process(_launches("a", "b")):
            raise AssertionError("the test's own")
    assert any("service b also failed" in note for note in caught.value.__notes__)
