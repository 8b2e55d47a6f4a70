"""Tests of the carbon-aware-sdk forecast query: parameter checks and the SDK's answer."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from proto.messages import Forecast
from services.gateway.carbon_aware import (
    MAX_LOCATIONS,
    ForecastQuery,
    emissions_forecast,
    parse_forecast_query,
    problem_details,
    region_of,
)
from services.gateway.errors import ApiError

START = datetime(2022, 8, 1, tzinfo=UTC).timestamp()
VALUES = [400.0, 380.0, 300.0, 310.0, 290.0, 420.0, 300.0, 290.0]


def _forecast(values: list[float] = VALUES) -> Forecast:
    return Forecast(
        region="PJM",
        issued_at=START - 10.0,
        start_s=START,
        step_s=3600,
        values=values,
        p10=[v * 0.9 for v in values],
        p90=[v * 1.1 for v in values],
    )


def _query(**params: str) -> ForecastQuery:
    return parse_forecast_query(params, ["PJM"])


def test_the_optimal_window_is_the_lowest_mean_and_every_window_is_listed() -> None:
    """Test a 3-hour window over 8 hourly values: six windows, their means, the best one
    (hours 2-4: mean 300) and the SDK's fields."""
    answer = emissions_forecast("PJM", _forecast(), _query(windowSize="180"), START + 5.0)
    data = answer["forecastData"]
    assert [p["value"] for p in data] == pytest.approx(
        [360.0, 330.0, 300.0, 340.0, 336.667, 336.667], abs=1e-3
    )
    assert [p["timestamp"] for p in data][:2] == ["2022-08-01T00:00:00Z", "2022-08-01T01:00:00Z"]
    assert answer["optimalDataPoints"] == [data[2]]
    assert data[2] == {
        "location": "PJM",
        "timestamp": "2022-08-01T02:00:00Z",
        "duration": 180,
        "value": 300.0,
    }
    assert answer["windowSize"] == 180
    assert answer["dataStartAt"] == "2022-08-01T00:00:00Z"
    assert answer["dataEndAt"] == "2022-08-01T08:00:00Z"
    assert answer["location"] == "PJM"
    assert answer["generatedAt"] == "2022-07-31T23:59:50Z"


def test_a_tie_goes_to_the_earliest_start_and_the_default_window_is_one_step() -> None:
    """Test that equal windows pick the earliest (running sooner is never worse) and that
    without windowSize each hour is its own window."""
    answer = emissions_forecast("PJM", _forecast([5.0, 3.0, 3.0, 4.0]), _query(), START)
    assert answer["windowSize"] == 60
    assert len(answer["forecastData"]) == 4
    assert answer["optimalDataPoints"][0]["timestamp"] == "2022-08-01T01:00:00Z"


def test_the_bounds_cut_the_windows_to_the_span_asked_for() -> None:
    """Test that windows start at or after dataStartAt and end by dataEndAt (a zone-less
    time is UTC), and that a window longer than what is left gives empty arrays."""
    bounded = _query(
        dataStartAt="2022-08-01T03:00:00", dataEndAt="2022-08-01T07:00:00Z", windowSize="120"
    )
    answer = emissions_forecast("PJM", _forecast(), bounded, START)
    assert [p["timestamp"][11:16] for p in answer["forecastData"]] == ["03:00", "04:00", "05:00"]
    assert answer["optimalDataPoints"][0]["value"] == pytest.approx(300.0)  # 04:00-06:00
    assert (answer["dataStartAt"], answer["dataEndAt"]) == (
        "2022-08-01T03:00:00Z",
        "2022-08-01T07:00:00Z",
    )
    too_long = _query(dataStartAt="2022-08-01T06:00:00Z", windowSize="240")
    empty = emissions_forecast("PJM", _forecast(), too_long, START)
    assert empty["forecastData"] == []
    assert empty["optimalDataPoints"] == []


@pytest.mark.parametrize(
    ("params", "locations", "param"),
    [
        ({}, [], "location"),
        ({}, [" "], "location"),
        ({}, [f"R{i}" for i in range(MAX_LOCATIONS + 1)], "location"),
        ({"windowSize": "0"}, ["PJM"], "windowSize"),
        ({"windowSize": "-60"}, ["PJM"], "windowSize"),
        ({"windowSize": "1.5"}, ["PJM"], "windowSize"),
        ({"windowSize": "99999999"}, ["PJM"], "windowSize"),
        ({"dataStartAt": "yesterday"}, ["PJM"], "dataStartAt"),
        (
            {"dataStartAt": "2022-08-02T00:00:00Z", "dataEndAt": "2022-08-01T00:00:00Z"},
            ["PJM"],
            "dataEndAt",
        ),
    ],
)
def test_bad_parameters_are_refused_by_name(
    params: dict[str, str], locations: list[str], param: str
) -> None:
    """Test that each malformed parameter is a 400 naming it."""
    with pytest.raises(ApiError) as caught:
        parse_forecast_query(params, locations)
    assert caught.value.status == 400
    assert caught.value.param == param


def test_any_window_size_is_the_sdk_s_time_weighted_rolling_average() -> None:
    """Test a 90-minute window over hourly values (the SDK accepts any whole minutes): each
    window one step after the last, each value weighted by the part of its hour inside
    (00:00-01:30: (400 * 60 + 380 * 30) / 90), the last window ending by the forecast's end,
    and a repeated location asked once."""
    answer = emissions_forecast("PJM", _forecast(), _query(windowSize="90"), START)
    data = answer["forecastData"]
    assert data[0]["value"] == pytest.approx((400 * 60 + 380 * 30) / 90, abs=1e-3)
    assert data[1]["value"] == pytest.approx((380 * 60 + 300 * 30) / 90, abs=1e-3)
    assert [p["timestamp"][11:16] for p in data] == [f"{h:02d}:00" for h in range(7)]
    assert all(p["duration"] == 90 for p in data)
    assert parse_forecast_query({}, ["PJM", "CISO", "PJM"]).locations == ("PJM", "CISO")


def test_windows_from_now_start_now_and_bounds_outside_the_forecast_are_refused() -> None:
    """Test that a ``dataStartAt`` inside an hour gives windows from that instant (the
    "from now" query), and that a bound outside the forecast is a 400 naming it, as the
    SDK's validation does, not an empty list."""
    now = START + 2 * 3600 + 1800  # 02:30
    start = datetime.fromtimestamp(now, UTC).isoformat()
    answer = emissions_forecast(
        "PJM", _forecast(), _query(dataStartAt=start, windowSize="60"), START
    )
    data = answer["forecastData"]
    assert data[0]["timestamp"] == "2022-08-01T02:30:00Z"
    assert data[0]["value"] == pytest.approx((300 + 310) / 2)
    assert answer["dataStartAt"] == "2022-08-01T02:30:00Z"
    assert len(data) == 5  # 02:30, 03:30 ... 06:30 (07:30 would end past 08:00)
    raw = emissions_forecast("PJM", _forecast(), _query(dataStartAt=start), START)
    assert raw["forecastData"][0]["timestamp"] == "2022-08-01T02:00:00Z"  # the hour holding now
    outside = (("dataStartAt", "2026-11-28T10:00:00Z"), ("dataEndAt", "2022-08-02T00:00:00Z"))
    for name, when in outside:
        with pytest.raises(ApiError) as caught:
            emissions_forecast("PJM", _forecast(), _query(**{name: when}), START)
        assert (caught.value.status, caught.value.param) == (400, name)
        assert "replay forecast of PJM" in caught.value.message


def test_zone_names_are_locations_and_errors_are_the_sdk_s_problem_details() -> None:
    """Test that eia:ERCO is looked up as region ERCO, a foreign prefix is refused, and an
    error's body is the SDK's (title, status, detail, errors by parameter)."""
    assert region_of("eia:ERCO") == "ERCO"
    assert region_of("em:US-CAL-CISO") == "US-CAL-CISO"
    assert region_of("PJM") == "PJM"
    with pytest.raises(ApiError) as caught:
        parse_forecast_query({}, ["xx:ERCO"])
    body = problem_details(caught.value)
    assert body["status"] == 400
    assert body["title"] == "ArgumentException"
    assert "xx:ERCO" in body["detail"]
    assert body["errors"] == {"location": [body["detail"]]}
    answer = emissions_forecast("eia:ERCO", _forecast(), _query(), START)
    assert answer["location"] == "eia:ERCO"
    assert answer["mode"] == "replay"
    assert "fallback" not in answer
