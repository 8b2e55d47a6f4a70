"""Gateway shell: the aiohttp site and the reply subscription, inside a service context.

``serve(ctx)`` is what ``python -m services.gateway`` and the in-process runner call; it
reads its settings from ``Settings.gateway`` (``GREENSERVE_GATEWAY__*``). Tests and the
fuzz bench use :class:`Gateway` (or :func:`open_gateway`) with an explicit config and port 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from nats.aio.subscription import Subscription

from services.gateway.app import build_app
from services.gateway.auth import KeyRing
from services.gateway.cells import CellPicker
from services.gateway.served_models import ServedModels
from services.gateway.state import NAME, GatewayState
from shared.bus import ensure_ingress_stream
from shared.config import GatewaySettings, Settings
from shared.lifecycle import ServiceContext, service_context
from shared.model_context import context_limits
from shared.resends import resend_after_reconnects
from shared.security.api_keys import load_api_keys
from shared.security.client_ids import pick_client_id
from shared.stream_keeper import keep_jetstream

__all__ = ["NAME", "Gateway", "open_gateway", "serve"]

logger = logging.getLogger(__name__)


class Gateway:
    """The HTTP ingress of one stack: start it, read its ``url``, stop it."""

    def __init__(self, ctx: ServiceContext, config: GatewaySettings) -> None:
        """Build the state; a malformed or unreadable API key file fails here, at start.

        Raises:
            ValueError: ``config.api_keys_file`` is malformed.
            OSError: it cannot be read.
        """
        tokenizer = ctx.settings.classifier.tokenizer_path
        keys_file = config.api_keys_file
        self.state = GatewayState(
            nc=ctx.nc,
            js=ctx.js,
            subjects=ctx.subjects,
            config=config,
            models=frozenset(ctx.settings.classifier.models),
            # Bound to the NATS user on a secured stack (the only id it may use there).
            client_id=pick_client_id(ctx.nc, None, "gw"),
            chars_per_token=None if tokenizer else config.chars_per_token,
            context_tokens=ctx.settings.classifier.max_context_tokens,
            model_contexts=context_limits(
                ctx.settings.classifier.models, ctx.settings.classifier.max_context_tokens
            ),
            cells=CellPicker(config.cells or (ctx.subjects.prefix,), config.cell_retry_s),
            store=ctx.redis,
            keys=ctx.keys,
            served=ServedModels(ctx.settings.worker.heartbeat_ttl_s),
            api_keys=(
                KeyRing(load_api_keys(keys_file), config.api_key_requests_per_min)
                if keys_file is not None
                else None
            ),
        )
        self._ctx = ctx
        self._runner: web.AppRunner | None = None
        self._subs: list[Subscription] = []
        self._keeper: asyncio.Task[None] | None = None
        self._askers: list[asyncio.Task[None]] = []
        """Per cell: after a reconnect, ask for the endings of the requests still waiting."""
        self._stopping = asyncio.Event()
        self.url = ""
        """Base URL once started, e.g. ``http://127.0.0.1:8080`` (clients add ``/v1``)."""

    async def start(self) -> str:
        """Subscribe to replies, make sure the ingress stream exists, open the port."""
        if self._runner is not None:
            return self.url
        state = self.state
        # Each cell replies within its own namespace: one subscription per cell.
        for cell in state.cells.cells:
            self._subs.append(
                await state.nc.subscribe(
                    cell.subjects.client_wildcard(state.client_id), cb=state.router.on_message
                )
            )
            # The models served are those the workers of every cell announce.
            self._subs.append(
                await state.nc.subscribe(
                    cell.subjects.worker_stats_wildcard, cb=state.served.on_message
                )
            )
            # A reconnect to another node misses what was published meanwhile: ask for
            # the endings of the requests still waiting (shared/resends.py).
            self._askers.append(
                asyncio.create_task(
                    resend_after_reconnects(
                        state.nc, cell.subjects, state.client_id, state.router.waiting
                    )
                )
            )
        if state.store is not None and state.keys is not None:
            await state.served.seed(state.store, state.keys)
        replicas = self._ctx.settings.nats.replicas
        await ensure_ingress_stream(state.js, state.subjects, replicas=replicas)
        check_s = self._ctx.settings.nats.jetstream_check_s
        self._keeper = asyncio.create_task(
            keep_jetstream(
                state.nc,
                [
                    (
                        "ingress stream",
                        lambda: ensure_ingress_stream(
                            state.js, state.subjects, within_s=check_s, replicas=replicas
                        ),
                    )
                ],
                self._stopping,
                service=NAME,
                check_s=check_s,
            )
        )
        runner = web.AppRunner(
            # With its own metrics port the process serves /metrics there, not here.
            build_app(state, serve_metrics=self._ctx.settings.telemetry.metrics_port is None),
            handle_signals=False,
            access_log=None,
            shutdown_timeout=self._ctx.settings.shutdown_timeout_s,
            # A client that disconnects cancels its handler at once, even while it waits for
            # the first token: the handler then cancels the request on the bus.
            handler_cancellation=True,
            # aiohttp closes a connection whose request head is not complete this long after
            # it opened or after its last response: idle sockets and slow headers alike.
            keepalive_timeout=state.config.idle_timeout_s,
            # The body is decoded by .body within its limits; aiohttp's own inflater raised a
            # 500 on bytes that were not what the header said, and had no limit of its own.
            auto_decompress=False,
        )
        await runner.setup()
        site = web.TCPSite(runner, state.config.host, state.config.port)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        logger.info(
            "gateway listening on %s (API keys %s, at most %d requests in flight)",
            self.url,
            "required" if state.api_keys is not None else "off",
            state.admission.limit,
        )
        return self.url

    async def stop(self) -> None:
        """Close the port (in-flight requests finish within the shutdown timeout)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            self._stopping.set()
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        askers, self._askers = self._askers, []
        for asker in askers:
            asker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asker
        subs, self._subs = self._subs, []
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


@contextlib.asynccontextmanager
async def open_gateway(settings: Settings, config: GatewaySettings) -> AsyncIterator[Gateway]:
    """A started gateway with its own NATS/Redis/telemetry context."""
    async with service_context(NAME, settings) as ctx:
        gateway = Gateway(ctx, config)
        await gateway.start()
        try:
            yield gateway
        finally:
            await gateway.stop()


async def serve(ctx: ServiceContext) -> None:
    """Run until ``ctx.stop`` is set."""
    gateway = Gateway(ctx, ctx.settings.gateway)
    await gateway.start()
    try:
        await ctx.stop.wait()
    finally:
        await gateway.stop()
