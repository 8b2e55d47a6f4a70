"""``greenserve bench overload``'s pure parts: arrivals, scoring, and the goals' verdicts."""

from __future__ import annotations

import argparse
import itertools

import pytest

from greenserve.bench.overload.options import add_arguments
from greenserve.bench.overload.run import _goals, poisson_trace
from greenserve.bench.overload.score import score_http, score_nats
from loadgen.http_replay import HttpRecord
from loadgen.replay import ClientRecord
from loadgen.traces import TraceRequest
from proto.messages import Completion, ErrorReply

SHAPE = TraceRequest(0.0, 512, 256)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def _http(status: int | None, seconds: float, retry_after: str = "") -> HttpRecord:
    return HttpRecord(
        SHAPE,
        "http://gw",
        sent_at=100.0,
        ended_at=100.0 + seconds,
        status=status,
        retry_after=retry_after,
        error="TimeoutError" if status is None else "",
    )


def _completion(rid: str, lat_s: float) -> Completion:
    return Completion(
        request_id=rid,
        worker_id="w",
        pool_id="p",
        region="PJM",
        request_class="SS",
        input_tokens=512,
        output_tokens=256,
        sent_at=0.0,
        accepted_at=0.0,
        first_token_at=0.0,
        finished_at=0.0,
        energy_j=1.0,
        lat_s=lat_s,
    )


def test_the_documented_run_is_ten_times_capacity_for_a_minute() -> None:
    """Test that the defaults are the documented run: 10× for 60 s over HTTP and NATS."""
    args = _args()
    assert (args.factor, args.duration_s, args.entries) == (10.0, 60.0, "http,nats")


def test_poisson_arrivals_have_the_asked_rate_within_the_duration() -> None:
    """Test that 50 req/s for 60 s gives about 3,000 arrivals, all inside the window, in
    order, of the one shape asked, the same for the same seed."""
    trace = poisson_trace(50.0, 60.0, 512, 256, seed=3)
    assert 2800 < len(trace) < 3200
    assert all(0 < a.t_s <= b.t_s < 60.0 for a, b in itertools.pairwise(trace))
    assert {(r.prompt_tokens, r.output_tokens) for r in trace} == {(512, 256)}
    assert trace == poisson_trace(50.0, 60.0, 512, 256, seed=3)


def test_http_scoring_counts_sheds_missing_retry_after_and_the_unanswered() -> None:
    """Test that 200s are admitted (p99 over the SLO), 429s shed (one without
    ``Retry-After`` counted), and a client timeout unanswered, which fails the goal."""
    records = [_http(200, 2.0), _http(200, 4.0), _http(429, 0.1, "1"), _http(429, 0.2)]
    got = score_http([*records, _http(None, 30.0)], slo_s=8.0)
    assert (got["completed"], got["shed_429"], got["unanswered"]) == (2, 2, 1)
    assert got["shed_429_without_retry_after"] == 1
    assert got["max_shed_answer_s"] == pytest.approx(0.2)
    assert got["p99_admitted_over_slo"] == pytest.approx(got["p99_admitted_s"] / 8.0)
    verdict = _goals({"entries": {"http": {**got, "gateway_rss": _rss(10.0)}}}, _args())
    assert verdict["http"] == {
        "every_request_answered_within_bound": False,
        "p99_admitted_within_slo": True,
        "gateway_rss_growth_bounded": True,
    }


def _rss(growth_mb: float) -> dict[str, float]:
    return {"before_mb": 100.0, "peak_mb": 100.0 + growth_mb, "after_mb": 100.0 + growth_mb}


def test_nats_scoring_judges_each_completion_against_its_own_deadline_window() -> None:
    """Test that a completion's SLO is ``alpha · lat_s / speedup``: at speed-up 2 and
    alpha 1.5, 3 s of wall is within a Lat of 4 s and not within a Lat of 3 s; the
    ``overloaded`` errors are the shed, other codes errors, a silent request unanswered."""
    fast = ClientRecord("a", SHAPE, sent_at=0.0, ended_at=3.0, completion=_completion("a", 4.0))
    slow = ClientRecord("b", SHAPE, sent_at=0.0, ended_at=3.0, completion=_completion("b", 3.0))
    shed = ClientRecord(
        "c",
        SHAPE,
        sent_at=0.0,
        ended_at=0.5,
        error=ErrorReply(code="overloaded", reason="queue_full: …", service="scheduler"),
    )
    other = ClientRecord(
        "d", SHAPE, ended_at=1.0, error=ErrorReply(code="no_route", reason="", service="c")
    )
    got = score_nats([fast, slow, shed, other, ClientRecord("e", SHAPE)], 1.5, 2.0)
    assert (got["completed"], got["shed_overloaded"], got["unanswered"]) == (2, 1, 1)
    assert got["errors"] == {"no_route": 1}
    assert got["admitted_within_slo"] == 1
    assert got["max_shed_answer_s"] == pytest.approx(0.5)
    assert got["p99_admitted_over_slo"] > 1.0
    verdict = _goals({"entries": {"nats": got}}, _args())["nats"]
    assert verdict == {
        "every_request_answered_within_bound": False,
        "p99_admitted_within_slo": False,
    }


def test_gateway_memory_growth_past_the_bound_fails_its_goal() -> None:
    """Test that 60 MB of growth fails a 50 MB bound while everything else passes."""
    got = score_http([_http(200, 1.0), _http(429, 0.1, "1")], slo_s=8.0)
    verdict = _goals({"entries": {"http": {**got, "gateway_rss": _rss(60.0)}}}, _args())
    assert verdict["http"]["gateway_rss_growth_bounded"] is False
    assert verdict["http"]["every_request_answered_within_bound"] is True
