"""``GET /emissions/forecasts/current``: the Carbon Aware SDK's forecast query, over Redis.

The query is parsed and each location's windows computed by the pure
:mod:`.carbon_aware`; this route reads the forecaster's latest forecast per location from
the store (one MGET) and answers a missing location, an unreachable store, a gateway with no
store in the SDK's problem-details shape (docs/gateway.md, Carbon-aware forecast query),
counted like the gateway's other errors.
"""

from __future__ import annotations

import time
from typing import Any

import redis.exceptions
from aiohttp import web

from proto.codec import decode
from proto.messages import Forecast
from services.gateway.carbon_aware import (
    emissions_forecast,
    parse_forecast_query,
    problem_details,
    region_of,
)
from services.gateway.errors import ApiError
from services.gateway.state import NAME, STATE
from shared.counters import ERRORS
from shared.store import as_bytes

__all__ = ["emissions_forecasts"]


async def emissions_forecasts(request: web.Request) -> web.Response:
    """The carbon-aware-sdk's ``/emissions/forecasts/current`` (:mod:`.carbon_aware`)."""
    try:
        body = await _forecasts_body(request)
    except ApiError as err:
        ERRORS.labels(NAME, err.code).inc()
        return web.json_response(
            problem_details(err), status=err.status, content_type="application/problem+json"
        )
    return web.json_response(body)


async def _forecasts_body(request: web.Request) -> list[dict[str, Any]]:
    state = request.app[STATE]
    query = parse_forecast_query(request.query, request.query.getall("location", []))
    if state.store is None or state.keys is None:
        raise ApiError("unavailable", "this gateway has no store to read forecasts from")
    try:
        raws = await state.store.mget(
            [state.keys.forecast(region_of(loc)) for loc in query.locations]
        )
    except (redis.exceptions.RedisError, OSError) as exc:
        raise ApiError("unavailable", f"the forecast store is unreachable: {exc}") from None
    found = {loc: raw for loc, raw in zip(query.locations, raws, strict=True) if raw is not None}
    missing = [loc for loc in query.locations if loc not in found]
    if missing:
        raise ApiError(
            "location_not_found", f"no carbon forecast for {', '.join(missing)}", param="location"
        )
    now = time.time()
    return [
        emissions_forecast(loc, decode(as_bytes(raw), Forecast), query, now)
        for loc, raw in found.items()
    ]
