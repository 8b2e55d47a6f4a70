"""A small aiohttp server per service: Prometheus ``/metrics`` and ``/healthz``."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

__all__ = ["start_metrics_server"]


async def _metrics(_request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _health(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def start_metrics_server(host: str, port: int) -> web.AppRunner:
    """Serve metrics on ``host:port``; the caller cleans the runner up on exit."""
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _health)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
