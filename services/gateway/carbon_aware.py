"""The carbon-aware-sdk's forecast query over the stack's own carbon forecasts.

``GET /emissions/forecasts/current?location=PJM[&location=eia:ERCO][&dataStartAt=...]
[&dataEndAt=...][&windowSize=<minutes>]`` answers as the Green Software Foundation's
Carbon Aware SDK WebAPI does: one object per location with ``forecastData`` and
``optimalDataPoints`` (the lowest point, the earliest on a tie; empty when no window
fits). With ``windowSize`` the points are the SDK's rolling average: windows of that many
minutes starting at ``dataStartAt`` (or the forecast's first point) and one forecast step
apart, each the time-weighted mean of the values it overlaps, so any whole number of
minutes works (90 over hourly values too), and a ``dataStartAt`` of "now" gives windows
from now (``EmissionsDataExtensions.RollingAverage`` and ``AverageOverPeriod`` in
Green-Software-Foundation/carbon-aware-sdk). Without it the points are the forecast's own
that overlap the bounds. A bound outside the forecast is refused, as the SDK's
``EmissionsForecast.Validate`` does.

A location is a region code (``PJM``) or a zone name (``eia:ERCO``, ``em:KR``;
:mod:`shared.zones`), answered under the name asked for. The forecasts are the
forecaster's (``services.forecaster``), read from the store; each answer adds ``mode``
(``replay``: the timestamps are the data's, not the wall clock's; ``live``) and, when the
live provider was out, ``fallback``. Errors are the SDK's problem details
(:func:`problem_details`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, Final

from proto.messages import Forecast
from proto.subjects import valid_token
from services.gateway.errors import ApiError

__all__ = [
    "MAX_LOCATIONS",
    "ForecastQuery",
    "emissions_forecast",
    "parse_forecast_query",
    "problem_details",
    "region_of",
]

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
    for name in names:
        region_of(name)  # a malformed name is a 400 before any lookup
    return ForecastQuery(names, start, end, window)


def region_of(location: str) -> str:
    """The region code a location names: ``eia:ERCO`` → ``ERCO``, ``PJM`` → ``PJM``.

    Raises:
        ApiError: not a code, or a prefix other than the zone sources'.
    """
    source, sep, code = location.partition(":")
    if not sep:
        code = source
    elif source not in ("eia", "em"):
        raise ApiError(
            "invalid_value",
            f"location {location!r}: write a region code or eia:<BA> / em:<ZONE>",
            param="location",
        )
    if not valid_token(code):
        raise ApiError(
            "invalid_value", f"location {location!r} is not a region code", param="location"
        )
    return code


_TITLES: Final = {400: "ArgumentException", 500: "InternalServerError"}
"""The SDK's titles: the exception's type for a 400, the status's name for a 500."""


def problem_details(err: ApiError) -> dict[str, Any]:
    """The SDK's error body (ASP.NET ``HttpValidationProblemDetails``, as its
    ``HttpResponseExceptionFilter`` writes it): ``title``, ``status``, ``detail``, and the
    offending parameter's messages under ``errors``."""
    body: dict[str, Any] = {
        "type": f"https://tools.ietf.org/html/rfc9110#status.{err.status}",
        "title": _TITLES.get(err.status, HTTPStatus(err.status).phrase),
        "status": err.status,
        "detail": err.message,
        "errors": {err.param: [err.message]} if err.param else {},
    }
    return body


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _mean_over(
    starts: list[float], step_s: float, values: list[float], lo: float, hi: float
) -> float:
    """Time-weighted mean of the step values over ``[lo, hi]`` (the SDK's
    ``AverageOverPeriod``: a value counts for the part of its step inside the span)."""
    total = 0.0
    for t, value in zip(starts, values, strict=True):
        overlap = min(hi, t + step_s) - max(lo, t)
        if overlap > 0:
            total += value * overlap
    return total / (hi - lo)


def emissions_forecast(
    location: str, forecast: Forecast, query: ForecastQuery, requested_at_s: float
) -> dict[str, Any]:
    """The SDK's ``EmissionsForecast`` object for one location's forecast.

    Raises:
        ApiError: a bound outside the forecast's span (named by parameter).
    """
    step = float(forecast.step_s)
    starts = [forecast.start_s + i * step for i in range(len(forecast.values))]
    first, end = forecast.start_s, forecast.start_s + len(starts) * step
    lo = query.data_start_s if query.data_start_s is not None else first
    hi = query.data_end_s if query.data_end_s is not None else end
    for name, bound in (("dataStartAt", lo), ("dataEndAt", hi)):
        if not first <= bound <= end:
            raise ApiError(
                "invalid_value",
                f"{name} {_iso(bound)} is outside the {forecast.mode} forecast of {location}, "
                f"{_iso(first)} to {_iso(end)}",
                param=name,
            )
    points: list[dict[str, Any]] = []
    if query.window_min is None:
        window_min = round(step / 60.0)
        points = [
            {"location": location, "timestamp": _iso(t), "duration": window_min, "value": v}
            for t, v in zip(starts, forecast.values, strict=True)
            if t + step > lo and t < hi
        ]
    else:
        window_min = query.window_min
        span = window_min * 60.0
        begin = max(lo, first)
        while begin + span <= min(hi, end) + 1e-6:
            mean = _mean_over(starts, step, list(forecast.values), begin, begin + span)
            points.append(
                {
                    "location": location,
                    "timestamp": _iso(begin),
                    "duration": window_min,
                    "value": round(mean, 3),
                }
            )
            begin += step
    best = min(range(len(points)), key=lambda j: points[j]["value"]) if points else None
    answer: dict[str, Any] = {
        "generatedAt": _iso(forecast.issued_at),
        "requestedAt": _iso(requested_at_s),
        "location": location,
        "dataStartAt": _iso(lo),
        "dataEndAt": _iso(hi),
        "windowSize": window_min,
        "optimalDataPoints": [] if best is None else [points[best]],
        "forecastData": points,
        "mode": forecast.mode,
    }
    if forecast.fallback:
        answer["fallback"] = forecast.fallback
    return answer
