"""The carbon-aware-sdk's forecast query over the stack's own carbon forecasts.

``GET /emissions/forecasts/current?location=PJM[&location=CISO][&dataStartAt=...]
[&dataEndAt=...][&windowSize=<minutes>]`` answers as the Green Software Foundation's
Carbon Aware SDK WebAPI does: one object per location with ``forecastData`` (the mean
forecast intensity of every window of ``windowSize`` minutes that fits between the bounds,
by start time) and ``optimalDataPoints`` (the lowest of them, the earliest on a tie; empty
when no window fits). So a batch scheduler written against the SDK can ask this stack when
to run. The forecasts are the forecaster's (``services.forecaster``), read from the store;
their timestamps are the stack's model time. Differences from the SDK: the window must be a
whole number of forecast steps (hours), as the forecaster issues hourly values; and errors
come in the gateway's error format (400 for a bad parameter, 404 for a location without a
forecast, 503 without the store).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from proto.messages import Forecast
from services.gateway.errors import ApiError
from shared.domain.best_window import window_means

__all__ = ["MAX_LOCATIONS", "ForecastQuery", "emissions_forecast", "parse_forecast_query"]

MAX_LOCATIONS: Final = 64
"""More locations than any fleet has regions: a longer list is refused, not looked up."""
MAX_WINDOW_MIN: Final = 7 * 24 * 60


@dataclass(frozen=True, slots=True)
class ForecastQuery:
    """A validated forecast query."""

    locations: tuple[str, ...]
    data_start_s: float | None
    """Windows start at or after this (epoch seconds); ``None``: the forecast's start."""
    data_end_s: float | None
    """Windows end at or before this; ``None``: the forecast's end."""
    window_min: int | None
    """Window length in minutes; ``None``: one forecast step."""


def _instant(name: str, text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ApiError(
            "invalid_value", f"{name} {text!r} is not an ISO 8601 time", param=name
        ) from None
    if moment.tzinfo is None:  # the SDK's own examples often omit the zone: read as UTC
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_forecast_query(params: Mapping[str, str], locations: Sequence[str]) -> ForecastQuery:
    """Validate the query's parameters (``locations``: every ``location`` given).

    Raises:
        ApiError: no location or too many, a malformed time, start after end, or a window
            that is not a positive whole number of minutes up to a week.
    """
    names = tuple(dict.fromkeys(loc.strip() for loc in locations if loc.strip()))
    if not names:
        raise ApiError("missing_field", "give at least one location=<region>", param="location")
    if len(names) > MAX_LOCATIONS:
        raise ApiError(
            "invalid_value", f"{len(names)} locations > {MAX_LOCATIONS}", param="location"
        )
    start = _instant("dataStartAt", params["dataStartAt"]) if "dataStartAt" in params else None
    end = _instant("dataEndAt", params["dataEndAt"]) if "dataEndAt" in params else None
    if start is not None and end is not None and start >= end:
        raise ApiError("invalid_value", "dataStartAt must be before dataEndAt", param="dataEndAt")
    window: int | None = None
    if "windowSize" in params:
        text = params["windowSize"]
        if not text.isdigit() or not 0 < int(text) <= MAX_WINDOW_MIN:
            raise ApiError(
                "invalid_value",
                f"windowSize {text!r} is not a whole number of minutes in 1..{MAX_WINDOW_MIN}",
                param="windowSize",
            )
        window = int(text)
    return ForecastQuery(names, start, end, window)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def emissions_forecast(
    location: str, forecast: Forecast, query: ForecastQuery, requested_at_s: float
) -> dict[str, Any]:
    """The SDK's ``EmissionsForecast`` object for one location's forecast.

    Raises:
        ApiError: the window is not a whole number of the forecast's steps.
    """
    step_min = forecast.step_s / 60.0
    window_min = query.window_min if query.window_min is not None else round(step_min)
    steps = window_min / step_min
    if steps != int(steps):
        raise ApiError(
            "invalid_value",
            f"windowSize {window_min} min is not a whole number of {step_min:g}-min steps",
            param="windowSize",
        )
    starts = [forecast.start_s + i * forecast.step_s for i in range(len(forecast.values))]
    lo, hi = query.data_start_s, query.data_end_s
    keep = [
        i
        for i, t in enumerate(starts)
        if (lo is None or t >= lo) and (hi is None or t + forecast.step_s <= hi)
    ]
    # Points kept are contiguous (the bounds cut the series at both ends only).
    values = [forecast.values[i] for i in keep]
    points: list[dict[str, Any]] = []
    if values and int(steps) <= len(values):
        means = window_means(values, int(steps))
        points = [
            {
                "location": location,
                "timestamp": _iso(starts[keep[j]]),
                "duration": window_min,
                "value": round(float(mean), 3),
            }
            for j, mean in enumerate(means)
        ]
    best = min(range(len(points)), key=lambda j: points[j]["value"]) if points else None
    first = starts[keep[0]] if keep else (lo if lo is not None else forecast.start_s)
    last = starts[keep[-1]] + forecast.step_s if keep else (hi if hi is not None else first)
    return {
        "generatedAt": _iso(forecast.issued_at),
        "requestedAt": _iso(requested_at_s),
        "location": location,
        "dataStartAt": _iso(first),
        "dataEndAt": _iso(last),
        "windowSize": window_min,
        "optimalDataPoints": [] if best is None else [points[best]],
        "forecastData": points,
    }
