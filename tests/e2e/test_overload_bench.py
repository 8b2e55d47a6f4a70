"""``greenserve bench overload`` in a short test mode: a real stack, 10× its measured
capacity for a few seconds over HTTP and NATS, every request answered."""

from __future__ import annotations

import argparse

import pytest

from greenserve.bench.overload.options import add_arguments
from greenserve.bench.overload.run import run

pytestmark = pytest.mark.connected


def test_a_short_overload_run_answers_every_request_and_sheds_the_excess() -> None:
    """Test that 10× capacity for 4 s over HTTP and over NATS is answered in full within
    the bound, most of it shed (429 with ``Retry-After``, ``overloaded`` on NATS), the rest
    completed, nothing twice, and the gateway's memory within its bound."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--duration-s", "4", "--calibrate-s", "4", "--answer-bound-s", "20", "--workers", "1"]
    )
    report = run(args)
    assert report["capacity_rps"] > 0
    for entry in ("http", "nats"):
        got = report["entries"][entry]
        assert got["requests"] > 0
        assert got["unanswered"] == 0
        assert got["completed"] > 0
        assert report["goals"][entry]["every_request_answered_within_bound"]
    http, nats = report["entries"]["http"], report["entries"]["nats"]
    assert http["shed_429"] > http["completed"]
    assert http["shed_429_without_retry_after"] == 0
    assert nats["shed_overloaded"] > nats["completed"]
    assert nats["duplicated"] == 0
    assert report["goals"]["http"]["gateway_rss_growth_bounded"]
