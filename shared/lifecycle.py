"""Service lifecycle: one context holds every resource; signals only set an event.

``main()`` of each service is ``run_service(NAME, serve)``: it loads settings once, enters
NATS, Redis and telemetry through an ``AsyncExitStack`` and calls ``serve(ctx)``, which
returns once ``ctx.stop`` is set and its own tasks are done. Teardown then drains NATS
(in-flight handlers finish), closes Redis and flushes spans, in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry import trace
from redis.asyncio import Redis

from proto.keys import Keys
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.clock import ModelClock
from shared.config import Settings, load_settings
from shared.gc_pauses import freeze_startup_heap, observe_pauses
from shared.logs import setup_logging
from shared.metrics_http import start_metrics_server
from shared.store import connect_redis
from shared.telemetry import setup_tracing

__all__ = ["ServiceContext", "event_loop_factory", "run_service", "service_context"]

logger = logging.getLogger(__name__)

EVENT_LOOP_ENV = "GREENSERVE_EVENT_LOOP"
"""``asyncio`` forces the standard loop; otherwise uvloop is used when it is installed."""


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop every service runs on: uvloop when installed, else the standard one.

    uvloop's C event loop and transports cut the CPU each message costs in every service
    (measured in ``docs/performance.md``); semantics are those of asyncio.
    """
    if os.environ.get(EVENT_LOOP_ENV, "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


@dataclass(slots=True)
class ServiceContext:
    """Everything a service shell needs, created once and passed down."""

    name: str
    settings: Settings
    nc: Client
    js: JetStreamContext
    redis: Redis
    subjects: Subjects
    keys: Keys
    clock: ModelClock
    tracer: trace.Tracer
    stop: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def service_context(name: str, settings: Settings) -> AsyncIterator[ServiceContext]:
    """Open NATS, Redis and telemetry for one service; close them in reverse order."""
    async with contextlib.AsyncExitStack() as stack:
        provider = setup_tracing(name, settings.telemetry.otlp_endpoint)
        if provider is not None:
            stack.callback(provider.shutdown)
        telemetry = settings.telemetry
        if telemetry.metrics_port is not None:
            runner = await start_metrics_server(telemetry.metrics_host, telemetry.metrics_port)
            stack.push_async_callback(runner.cleanup)
        redis = connect_redis(settings.redis)
        stack.push_async_callback(redis.aclose)
        nc = await connect_nats(settings.nats, f"greenserve-{name}")
        stack.push_async_callback(_drain, nc, settings.shutdown_timeout_s)
        ctx = ServiceContext(
            name=name,
            settings=settings,
            nc=nc,
            js=nc.jetstream(),
            redis=redis,
            subjects=Subjects(settings.namespace),
            keys=Keys(settings.namespace),
            clock=ModelClock.from_settings(settings.clock),
            tracer=trace.get_tracer(f"greenserve.{name}"),
        )
        yield ctx


async def _drain(nc: Client, timeout_s: float) -> None:
    if nc.is_closed:
        return
    try:
        await asyncio.wait_for(nc.drain(), timeout_s)
    except (TimeoutError, Exception):  # drain failing must not block the rest of teardown
        logger.warning("nats drain did not finish cleanly; closing")
        with contextlib.suppress(Exception):
            await nc.close()


def run_service(
    name: str,
    serve: Callable[[ServiceContext], Awaitable[None]],
    settings: Settings | None = None,
) -> None:
    """Entry point of a service process: settings, logging, signals, resources, serve."""
    settings = settings or load_settings()
    setup_logging(name, settings.telemetry.log_level, settings.telemetry.log_json)

    async def amain() -> None:
        async with service_context(name, settings) as ctx:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, ctx.stop.set)
            # Imports, settings and connections live as long as the process: a full
            # collection need not walk them again (shared/gc_pauses.py).
            freeze_startup_heap()
            observe_pauses(name)
            logger.info("%s started (namespace %s)", name, settings.namespace)
            await serve(ctx)
            logger.info("%s stopping", name)

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(amain())
