"""Liveness and readiness: ``/healthz`` says the process serves, ``/readyz`` that requests flow,
``/health`` the same as ``/readyz`` in vLLM's form.

The two answer different questions and an orchestrator acts on them differently: a failed
liveness probe restarts the process, a failed readiness probe only takes it out of the
load balancer. So ``/healthz`` is 200 while the event loop answers at all (restarting the
gateway cannot bring NATS back), and ``/readyz`` is 503 with its reasons while a request
sent here could not reach a worker and come back: NATS disconnected, the ingress stream
missing (a server that lost its store, until its owners create it again), Redis
unreachable (the scheduler's hand-off needs it), or no live worker registered.

``/health`` answers as a vLLM server does, for load tools (guidellm and others) that probe it
before they send load and stop at anything but a 200: 200 with an empty body when ready, 503
with an empty body when not (vLLM's answer once its engine is dead). The reasons are on
``/readyz``.

Readiness is cheap: its checks run at most once per ``cache_s`` whatever the probe rate,
concurrent probes share one run, and the worker check costs one ``EXISTS`` of the worker
found last time, scanning the registry only when that one has gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import nats.errors
from aiohttp import web
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, RedisError

from proto.keys import Keys
from proto.subjects import Subjects
from services.gateway.state import NAME, STATE
from shared.counters import ERRORS

__all__ = ["READINESS", "Readiness", "ReadinessConfig", "ReadinessProbe", "add_health_routes"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadinessConfig:
    """How often and how long readiness asks its dependencies."""

    cache_s: float = 1.0
    """A result is answered again for this long before the checks run again."""
    check_timeout_s: float = 0.5
    """A dependency that does not answer within this is counted as not ready."""
    scan_count: int = 1000
    """Keys per ``SCAN`` step while looking for a live worker."""

    def __post_init__(self) -> None:
        if self.cache_s < 0 or self.check_timeout_s <= 0 or self.scan_count < 1:
            raise ValueError(f"invalid readiness config {self!r}")


@dataclass(frozen=True, slots=True)
class Readiness:
    """One readiness verdict: ready when no check gave a reason."""

    reasons: tuple[str, ...]
    checked_at: float
    """Monotonic time of the checks."""
    notes: tuple[str, ...] = ()
    """What could not be checked (and so did not count against readiness)."""

    @property
    def ready(self) -> bool:
        """Whether requests can flow end to end, as far as the checks see."""
        return not self.reasons


@dataclass(slots=True)
class ReadinessProbe:
    """The checks behind ``/readyz``, with their result cached for ``config.cache_s``."""

    nc: Client
    js: JetStreamContext
    subjects: Subjects
    redis: Redis | None
    keys: Keys | None
    config: ReadinessConfig = field(default_factory=ReadinessConfig)
    _last: Readiness | None = None
    _running: asyncio.Task[Readiness] | None = None
    _live_worker: str | None = None
    """The worker key found live last time: one EXISTS checks it again."""

    async def check(self) -> Readiness:
        """The cached verdict, or a fresh one (one run shared by concurrent callers)."""
        last = self._last
        if last is not None and time.monotonic() - last.checked_at < self.config.cache_s:
            return last
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._run())
        # Shielded: a probe that disconnects must not cancel the run others wait on.
        result = await asyncio.shield(self._running)
        self._last = result
        return result

    async def _run(self) -> Readiness:
        reasons: list[str] = []
        notes: list[str] = []
        if not self.nc.is_connected:
            reasons.append("nats disconnected")
        else:
            reason = await self._stream_reason()
            if reason:
                reasons.append(reason)
        if self.redis is None or self.keys is None:
            reasons.append("redis not configured")
        else:
            reason, note = await self._redis_reasons(self.redis, self.keys)
            reasons += [reason] if reason else []
            notes += [note] if note else []
        return Readiness(tuple(reasons), time.monotonic(), tuple(notes))

    async def _stream_reason(self) -> str | None:
        stream = self.subjects.ingress_stream
        try:
            async with asyncio.timeout(self.config.check_timeout_s):
                await self.js.stream_info(stream)
        except NotFoundError:
            return f"ingress stream {stream} missing"
        except (nats.errors.Error, TimeoutError) as exc:
            return f"ingress stream {stream} did not answer: {type(exc).__name__}"
        return None

    async def _redis_reasons(self, redis: Redis, keys: Keys) -> tuple[str | None, str | None]:
        """(reason not ready, note) from Redis: reachable, and a live worker registered."""
        try:
            async with asyncio.timeout(self.config.check_timeout_s):
                await redis.ping()
                alive = await self._any_live_worker(redis, keys)
        except NoPermissionError:
            # A secured gateway may not read the worker registry: say so, do not fail on it.
            return None, "worker registry not readable with this identity; not checked"
        except (RedisError, OSError, TimeoutError) as exc:
            return f"redis unreachable: {type(exc).__name__}", None
        return (None if alive else "no live worker registered"), None

    async def _any_live_worker(self, redis: Redis, keys: Keys) -> bool:
        # Registrations expire with their heartbeats: an existing key is a live worker.
        if self._live_worker is not None and await redis.exists(self._live_worker):
            return True
        self._live_worker = None
        async for key in redis.scan_iter(match=keys.worker_pattern, count=self.config.scan_count):
            self._live_worker = key.decode() if isinstance(key, bytes) else str(key)
            return True
        return False


READINESS: web.AppKey[ReadinessProbe] = web.AppKey("readiness", ReadinessProbe)


async def _alive(_request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def _health(request: web.Request) -> web.Response:
    # vLLM's /health: no body either way, only the status.
    if (await request.app[READINESS].check()).ready:
        return web.Response(status=200)
    ERRORS.labels(NAME, "not_ready").inc()
    return web.Response(status=503)


async def _ready(request: web.Request) -> web.Response:
    verdict = await request.app[READINESS].check()
    body: dict[str, object] = {"status": "ready" if verdict.ready else "not ready"}
    if verdict.reasons:
        body["reasons"] = list(verdict.reasons)
    if verdict.notes:
        body["notes"] = list(verdict.notes)
    if verdict.ready:
        return web.json_response(body)
    ERRORS.labels(NAME, "not_ready").inc()
    return web.json_response(body, status=503)


def add_health_routes(app: web.Application, config: ReadinessConfig | None = None) -> None:
    """``/healthz`` (liveness), ``/readyz`` (readiness) and vLLM's ``/health`` (readiness,
    status only) over the app's gateway state."""
    state = app[STATE]
    app[READINESS] = ReadinessProbe(
        nc=state.nc,
        js=state.js,
        subjects=state.subjects,
        redis=state.store,
        keys=state.keys,
        config=config or ReadinessConfig(),
    )
    app.router.add_get("/healthz", _alive)
    app.router.add_get("/readyz", _ready)
    app.router.add_get("/health", _health)
