"""Property tests: the fast BF-IO lookahead (seed 003, Sec. 2.2) equals the code it replaced.

The reference is the frozen lookahead of ``bfio_reference`` (the code before the BF-IO
speed-ups; ``base_trajectories`` as of c02f3c3 returned the same bits): per-sequence KV
binned by finish step, then reversed cumulative sums. The new code must return the same
array, dtype and bits (``-0.0`` included), with and without a snapshot cache, for any
snapshot: empty workers, missing predictions, per-sequence KV or the mean-KV fallback,
negative or huge values, refill on and off.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from services.router.lookahead import SnapshotCache, base_trajectories
from services.router.placement import WorkerLoad
from tests.unit.router.bfio_reference import reference_base_trajectories


def _same_bits(got: NDArray[np.float64], want: NDArray[np.float64]) -> bool:
    return (
        got.dtype == want.dtype
        and got.shape == want.shape
        and bool(got.flags.c_contiguous)
        and got.tobytes() == want.tobytes()
    )


_KV = st.one_of(
    st.integers(0, 3_000_000),
    st.integers(-5_000, -1),  # invalid, but both routes must agree (fallback route)
    st.integers(2**52, 2**62),  # past float64's exact integers: the guard's fallback route
)


@st.composite
def _worker(draw: st.DrawFn, index: int) -> WorkerLoad:
    running = draw(st.sampled_from([0, 0, 1, 4, draw(st.integers(0, 300))]))
    predicted = draw(st.sampled_from(["all", "all", "all", "none", "short"]))
    remaining: tuple[int, ...] = ()
    if predicted == "all":
        remaining = tuple(draw(st.lists(st.integers(-3, 400), min_size=running, max_size=running)))
    elif predicted == "short" and running > 1:
        remaining = tuple(draw(st.lists(st.integers(0, 400), max_size=running - 1)))
    per_seq_kv = draw(st.integers(0, 9)) == 0  # rare: the registry never sends it
    running_kv: tuple[int, ...] = ()
    if per_seq_kv:
        running_kv = tuple(draw(st.lists(st.integers(0, 5000), min_size=running, max_size=running)))
    return WorkerLoad(
        worker_id=f"w{index}",
        free_slots=draw(st.integers(0, 8)),
        running=running,
        kv_tokens=draw(_KV),
        predicted_remaining=remaining,
        running_kv=running_kv,
    )


@st.composite
def _fleet(draw: st.DrawFn) -> list[WorkerLoad]:
    count = draw(st.integers(1, 8))
    return [draw(_worker(g)) for g in range(count)]


_HORIZON = st.sampled_from([0, 1, 7, 80])
_REFILL = st.one_of(st.just(0.0), st.floats(0.5, 8000.0, allow_nan=False))


def _one(running: int, kv_tokens: int, remaining: tuple[int, ...]) -> list[WorkerLoad]:
    return [
        WorkerLoad(
            worker_id="w0",
            free_slots=1,
            running=running,
            kv_tokens=kv_tokens,
            predicted_remaining=remaining,
        )
    ]


@settings(max_examples=300, deadline=None)
@given(workers=_fleet(), horizon=_HORIZON, refill=_REFILL)
# A negative mean KV: the old code's empty steps are +0.0, a product would give -0.0.
@example(workers=_one(1, -50, (2,)), horizon=7, refill=0.0)
# Sums past 2**53 round in float64: only the old route's own order reproduces them.
@example(workers=_one(3, 3 * (2**60 + 1), (1, 5, 9)), horizon=7, refill=0.0)
@example(workers=_one(3, 3 * (2**60 + 1), (1, 5, 9)), horizon=7, refill=300.5)
def test_base_trajectories_equal_the_old_code_bit_for_bit(
    workers: list[WorkerLoad], horizon: int, refill: float
) -> None:
    """Test that the fast lookahead returns the old code's array, uncached and cached."""
    want = reference_base_trajectories(workers, horizon, refill)
    assert _same_bits(base_trajectories(workers, horizon, refill), want)
    cache = SnapshotCache()
    assert _same_bits(base_trajectories(workers, horizon, refill, cache=cache), want)
    # The same snapshots again: every row now comes from the cache.
    assert _same_bits(base_trajectories(workers, horizon, refill, cache=cache), want)


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(st.tuples(_fleet(), st.integers(0, 255)), min_size=1, max_size=12),
    horizon=_HORIZON,
    refill=_REFILL,
)
def test_a_cache_going_dormant_and_probing_never_changes_a_result(
    steps: list[tuple[list[WorkerLoad], int]], horizon: int, refill: float
) -> None:
    """Test that any sequence of fresh and repeated snapshots gives the uncached result."""
    cache = SnapshotCache(idle_after=2, probe_every=3)
    previous: list[WorkerLoad] = []
    for fresh, keep in steps:
        # Bit g of ``keep`` reuses the previous call's worker g (a cache hit if unchanged).
        workers = [
            previous[g] if g < len(previous) and keep >> g & 1 else w for g, w in enumerate(fresh)
        ]
        want = reference_base_trajectories(workers, horizon, refill)
        assert _same_bits(base_trajectories(workers, horizon, refill, cache=cache), want)
        previous = workers


def _live_worker(rng: np.random.Generator, g: int) -> WorkerLoad:
    running = int(rng.integers(1, 40))
    return WorkerLoad(
        worker_id=f"w{g}",
        free_slots=2,
        running=running,
        kv_tokens=int(rng.integers(100, 90_000)),
        predicted_remaining=tuple(int(r) for r in rng.geometric(1 / 50, running)),
    )


def test_cache_goes_dormant_on_fresh_snapshots_and_wakes_when_they_repeat() -> None:
    """Test that the cache stops bookkeeping when it cannot hit and resumes after a probe."""
    rng = np.random.default_rng(3)
    cache = SnapshotCache(idle_after=3, probe_every=4)
    for _ in range(3):
        base_trajectories([_live_worker(rng, g) for g in range(4)], 20, cache=cache)
    assert (cache.hits, cache.misses) == (0, 12)
    fixed = [_live_worker(rng, g) for g in range(4)]
    for _ in range(3):  # dormant: bypassed, so nothing is counted
        base_trajectories(fixed, 20, cache=cache)
    assert (cache.hits, cache.misses) == (0, 12)
    base_trajectories(fixed, 20, cache=cache)  # the probe records ...
    base_trajectories(fixed, 20, cache=cache)  # ... and the next call hits: awake again
    assert (cache.hits, cache.misses) == (4, 16)
    again = base_trajectories(fixed, 20, cache=cache)
    assert (cache.hits, cache.misses) == (8, 16)
    assert _same_bits(again, reference_base_trajectories(fixed, 20))
