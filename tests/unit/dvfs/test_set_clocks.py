"""The dvfs agent's concurrent clock commands keep the control loop's failure handling."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from services.dvfs import service
from shared.lifecycle import ServiceContext


async def test_an_unexpected_failure_is_raised_after_every_command_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that one command's unexpected error neither cuts the others short nor is lost:
    it reaches the control loop (which counts and logs it) once all have ended."""
    done: list[str] = []

    async def fake_set_clock(_ctx: ServiceContext, worker_id: str, mhz: float, _r: str) -> None:
        if worker_id == "bad":
            raise RuntimeError("connection closed")
        await asyncio.sleep(0.05)
        done.append(f"{worker_id}@{mhz:g}")

    monkeypatch.setattr(service, "_set_clock", fake_set_clock)
    commands = [("bad", 900.0), ("w1", 1005.0), ("w2", 1200.0)]
    with pytest.raises(RuntimeError, match="connection closed"):
        await service._set_clocks(cast(ServiceContext, None), commands, "fixed")
    assert sorted(done) == ["w1@1005", "w2@1200"]
