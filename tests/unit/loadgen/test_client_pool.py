"""How the client pool splits a load among its processes."""

from __future__ import annotations

import itertools
import time

import pytest

from loadgen.client_pool import ClientPool, split_at_random
from loadgen.traces import synthetic_trace


def test_a_random_split_keeps_every_request_once_in_arrival_order() -> None:
    """Test that the parts partition the trace, each in arrival order, the same for a seed,
    and that each part gets about its share (a uniform draw, not a round robin)."""
    trace = synthetic_trace(rate_rps=500, duration_s=4, seed=1)
    parts = split_at_random(trace, 3, seed=5)
    assert sorted(id(r) for part in parts for r in part) == sorted(id(r) for r in trace)
    for part in parts:
        assert [r.t_s for r in part] == sorted(r.t_s for r in part)
        assert abs(len(part) - len(trace) / 3) < 0.1 * len(trace)
    assert parts == split_at_random(trace, 3, seed=5)
    assert parts != split_at_random(trace, 3, seed=6)
    # Not a round robin: some consecutive arrivals land in the same part.
    first = [next(i for i, p in enumerate(parts) if r in p) for r in trace[:30]]
    assert any(a == b for a, b in itertools.pairwise(first))


def test_a_pool_needs_a_client() -> None:
    """Test that zero clients is refused."""
    with pytest.raises(ValueError, match="at least one client"):
        ClientPool("nats://127.0.0.1:1", [("ns", [])], 0, seed=1, model="m")


def test_a_client_process_that_dies_is_reported_at_once_not_after_the_timeout() -> None:
    """Test that a client exiting before it is ready (here: a URL nats-py refuses) ends
    ``start`` with its exit code within seconds, not after the 60-s start timeout."""
    pool = ClientPool("tls://", [("ns", [])], 1, seed=1, model="m")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with code 1"):
        pool.start()
    assert time.monotonic() - started < 30.0
