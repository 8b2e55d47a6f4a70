"""An in-process clock agent over the fake GPUs, for the clock tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from services.clockd.agent import run_agent
from shared.gpu.clock_lock import ClockLocker
from tests import fake_pynvml

__all__ = ["running_agent"]


@asynccontextmanager
async def running_agent(path: Path) -> AsyncIterator[asyncio.Task[None]]:
    """An agent on the fake node, stopped (and its GPUs reset) on the way out."""
    ready = asyncio.Event()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_agent(ClockLocker(fake_pynvml), path, ready=ready.set, stop=stop)
    )
    await asyncio.wait_for(ready.wait(), 5.0)
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)
