"""Drive an engine model in model time: an iteration of d model seconds takes d / K wall seconds.

Shared by the worker's ``sim`` backend and ``greenserve sim-engine``. Engine time starts
at 0 when the pacer is built; while the engine has no work its time follows the wall clock
(at idle power), so a request arriving after a pause starts at the right model instant.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Final

from shared.engine import Engine, EngineRequest, IterationResult
from shared.loops import wait_event

__all__ = ["IDLE_POLL_S", "PacedEngine"]

IDLE_POLL_S: Final = 0.05
"""Wall period at which an idle engine's time catches up with the wall clock."""

IterationHandler = Callable[[IterationResult, float], Awaitable[None]]


class PacedEngine:
    """One engine, stepped no faster than model time allows."""

    def __init__(self, engine: Engine, speedup: float) -> None:
        """Wrap ``engine``; ``speedup`` K model seconds pass per wall second."""
        if speedup <= 0:
            raise ValueError("speedup must be positive")
        self._engine = engine
        self._speedup = speedup
        self._wall0 = time.time()
        self._work = asyncio.Event()

    @property
    def engine(self) -> Engine:
        """The engine model."""
        return self._engine

    @property
    def speedup(self) -> float:
        """Model seconds per wall second."""
        return self._speedup

    def wall_of(self, engine_s: float) -> float:
        """Wall time of an engine instant."""
        return self._wall0 + engine_s / self._speedup

    def engine_now(self) -> float:
        """Engine time that corresponds to now."""
        return (time.time() - self._wall0) * self._speedup

    def catch_up(self) -> None:
        """Bring an idle engine's time (and idle energy) up to now."""
        if not self._engine.has_work:
            self._engine.idle_until(max(self._engine.now_s, self.engine_now()))

    def add(self, request_id: str, prompt_tokens: int, output_tokens: int) -> None:
        """Queue a request arriving now.

        Raises:
            ValueError: when the engine can never fit it (or the id is a duplicate).
        """
        self.catch_up()
        self._engine.add(
            EngineRequest(
                request_id=request_id,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                arrival_s=self._engine.now_s,
            )
        )
        self._work.set()

    def abort(self, request_id: str) -> bool:
        """Drop a request; returns whether it was known."""
        return self._engine.abort(request_id)

    async def run(self, on_iteration: IterationHandler) -> None:
        """Step the engine forever, handing each iteration and its wall time to ``on_iteration``."""
        engine = self._engine
        while True:
            if not engine.has_work:
                self._work.clear()
                await wait_event(self._work, IDLE_POLL_S)
                self.catch_up()
                continue
            result = engine.step()
            if result is None:
                await asyncio.sleep(0)
                continue
            delay = self.wall_of(engine.now_s) - time.time()
            # Sleep even when late so bus and HTTP handlers are never starved.
            await asyncio.sleep(max(0.0, delay))
            await on_iteration(result, time.time())
