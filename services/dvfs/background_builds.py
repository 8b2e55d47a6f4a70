"""Values built per key in a worker thread, for the live agent's per-engine models.

Predictive control's IPS model and profile control's profile both take 0.4–2 s of CPU to
build per engine; the agent's loop must not stall for them, so each is built in a thread at
first demand and the caller leaves the clock alone until it is ready. A rebuild (the profile
after the served mix drifted) keeps serving the old value until the new one is ready.
:class:`ImmediateBuilds` is the same interface built at once, for offline replays whose model
time does not pass while a profile is swept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

__all__ = ["BackgroundBuilds", "Builds", "ImmediateBuilds"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

logger = logging.getLogger(__name__)


K_in = TypeVar("K_in", bound=Hashable, contravariant=True)


class Builds(Protocol[K_in, V]):
    """One value per key, built on demand and rebuilt on request."""

    def get(self, key: K_in, build: Callable[[], V] | None) -> V | None:
        """The value of ``key`` if built; else start ``build`` (unless None) and return None."""
        ...

    def rebuild(self, key: K_in, build: Callable[[], V]) -> None:
        """Build ``key`` again; its current value serves until the new one replaces it."""
        ...

    def close(self) -> None:
        """Stop builds still running."""
        ...


class ImmediateBuilds(Generic[K, V]):
    """Builds at the call, in the caller's thread (offline replays)."""

    def __init__(self) -> None:
        """Nothing built yet."""
        self._values: dict[K, V] = {}

    def get(self, key: K, build: Callable[[], V] | None) -> V | None:
        """The value of ``key``, built now if ``build`` is given and it has none."""
        if key not in self._values and build is not None:
            self._values[key] = build()
        return self._values.get(key)

    def rebuild(self, key: K, build: Callable[[], V]) -> None:
        """Replace the value of ``key`` now."""
        self._values[key] = build()

    def close(self) -> None:
        """Nothing runs in the background."""


class BackgroundBuilds(Generic[K, V]):
    """One value per key, built in a thread on first demand; a failed build is retried."""

    def __init__(self, what: str) -> None:
        """``what`` names the values in log lines ("the IPS model")."""
        self._what = what
        self._values: dict[K, V] = {}
        self._pending: dict[K, asyncio.Task[None]] = {}

    def get(self, key: K, build: Callable[[], V] | None) -> V | None:
        """The value of ``key`` if built; else start ``build`` (unless None) and return None."""
        value = self._values.get(key)
        if value is None and build is not None and key not in self._pending:
            self._pending[key] = asyncio.create_task(self._build(key, build))
        return value

    def rebuild(self, key: K, build: Callable[[], V]) -> None:
        """Build ``key`` again in a thread unless a build of it is running; the current value
        serves until the new one replaces it (a failed rebuild keeps it)."""
        if key not in self._pending:
            self._pending[key] = asyncio.create_task(self._build(key, build))

    async def _build(self, key: K, build: Callable[[], V]) -> None:
        try:
            began = time.perf_counter()
            self._values[key] = await asyncio.to_thread(build)
            logger.info("built %s of %s in %.1f s", self._what, key, time.perf_counter() - began)
        except Exception:
            logger.exception("building %s of %s failed", self._what, key)
        finally:
            self._pending.pop(key, None)

    def close(self) -> None:
        """Cancel builds still running."""
        for task in self._pending.values():
            task.cancel()
