"""The gateway's middleware times every HTTP request by route and status."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY

from services.gateway.middleware import observe

ROUTE = "/test-latency/{name}"


def _count(route: str, status: str) -> float:
    labels = {"route": route, "status": status}
    value = REGISTRY.get_sample_value("greenserve_http_request_duration_seconds_count", labels)
    return value or 0.0


async def _hello(request: web.Request) -> web.Response:
    return web.json_response({"name": request.match_info["name"]})


async def test_each_request_is_timed_under_its_route_template_and_status() -> None:
    """Test a matched route (counted under its template, not its path) and an unmatched
    path (a JSON 404 under ``unmatched``): one observation each in the latency histogram,
    beside the request counter."""
    app = web.Application(middlewares=[observe])
    app.router.add_get(ROUTE, _hello)
    before = (_count(ROUTE, "200"), _count("unmatched", "404"))
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/test-latency/a")).status == 200
        assert (await client.get("/test-latency/b")).status == 200
        assert (await client.get("/nowhere")).status == 404
    assert (_count(ROUTE, "200"), _count("unmatched", "404")) == (before[0] + 2, before[1] + 1)
    total = REGISTRY.get_sample_value(
        "greenserve_http_request_duration_seconds_sum", {"route": ROUTE, "status": "200"}
    )
    assert total is not None
    assert total > 0.0
