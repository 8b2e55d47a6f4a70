"""Unit tests of the router's worker registry."""

from __future__ import annotations

from proto.messages import WorkerStats
from services.router.registry import WorkerRegistry
from tests.factories import worker_stats
from tests.unit.spine.test_worker_streams import _classified


def _stats(wid: str, pool: str = "p", max_seqs: int = 2) -> WorkerStats:
    return worker_stats(wid, pool_id=pool, max_num_seqs=max_seqs, free_slots=max_seqs)


def test_free_slots_count_the_routers_own_placements() -> None:
    """Test that two placements take two slots before any heartbeat reports them."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(_stats("w1"), now_wall_s=0.0)
    assert reg.loads("p", 0.0)[0].free_slots == 2
    assert reg.placed(_classified("a", 10), "w1", 0.0)
    assert reg.placed(_classified("b", 10), "w1", 0.0)
    load = reg.loads("p", 0.0)[0]
    assert load.free_slots == 0
    assert sorted(load.predicted_remaining) == [10, 10]
    reg.ended("a")
    assert reg.loads("p", 0.0)[0].free_slots == 1


def test_a_silent_worker_expires_and_hands_back_its_requests() -> None:
    """Test that a worker past its heartbeat timeout is dropped and its requests are orphaned."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(_stats("w1"), now_wall_s=0.0)
    reg.update(_stats("w2"), now_wall_s=0.0)
    reg.placed(_classified("a", 10), "w1", 0.0)
    assert reg.confirm("a")
    reg.update(_stats("w2"), now_wall_s=4.0)
    orphans = reg.expire(now_wall_s=4.5)
    assert [o.request.request.request_id for o in orphans] == ["a"]
    assert [w.worker_id for w in reg.loads("p", 0.0)] == ["w2"]


def test_a_request_whose_dispatch_is_on_the_wire_is_not_orphaned() -> None:
    """Test that expiry leaves an unanswered dispatch to its own timeout (no double queue)."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(_stats("w1"), now_wall_s=0.0)
    reg.placed(_classified("a", 10), "w1", 0.0)
    assert reg.expire(now_wall_s=4.5) == []
    assert reg.release("a") is not None  # its dispatch timed out: the router re-queues it
    assert reg.release("a") is None  # and only once


def test_a_refused_placement_frees_its_slot_without_an_early_end_mark() -> None:
    """Test that release undoes a placement and a later placement of the id holds."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(_stats("w1"), now_wall_s=0.0)
    reg.placed(_classified("a", 10), "w1", 0.0)
    assert reg.loads("p", 0.0)[0].free_slots == 1
    reg.release("a")
    assert reg.loads("p", 0.0)[0].free_slots == 2
    assert reg.placed(_classified("a", 10), "w1", 0.0)
    assert reg.confirm("a")


def test_a_request_that_ends_before_its_worker_answers_is_not_confirmed() -> None:
    """Test that an end arriving before the dispatch reply leaves nothing to record."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(_stats("w1"), now_wall_s=0.0)
    reg.placed(_classified("a", 10), "w1", 0.0)
    reg.ended("a")
    assert not reg.confirm("a")
    assert reg.loads("p", 0.0)[0].free_slots == 2


def test_a_request_that_ends_before_its_dispatch_reply_is_not_recorded() -> None:
    """Test that the done-before-accept race does not leak a slot."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(_stats("w1"), now_wall_s=0.0)
    reg.ended("fast")
    assert not reg.placed(_classified("fast", 1), "w1", 0.0)
    assert reg.loads("p", 0.0)[0].free_slots == 2


def test_a_request_placed_before_its_workers_first_heartbeat_counts_as_its_own() -> None:
    """Test that an adopted placement on a worker not heard of yet takes its slot once the
    worker's stats arrive, and is orphaned with it."""
    reg = WorkerRegistry(timeout_s=3.0)
    assert reg.placed(_classified("a", 10), "w1", 0.0)  # adopted at a router's start
    assert reg.confirm("a")
    reg.update(_stats("w1"), now_wall_s=1.0)
    assert reg.loads("p", 0.0)[0].free_slots == 1
    orphans = reg.expire(now_wall_s=5.0)
    assert [o.request.request.request_id for o in orphans] == ["a"]


def test_a_worker_restarted_within_the_timeout_hands_back_what_its_earlier_run_held() -> None:
    """Test that a later ``started_at`` under the same id orphans the requests the earlier
    run accepted, and keeps those the new run accepted."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(worker_stats("w1", max_num_seqs=4, started_at=100.0), now_wall_s=0.0)
    reg.placed(_classified("old", 10), "w1", 0.0)
    assert reg.confirm("old", accepted_at=150.0)
    reg.placed(_classified("new", 10), "w1", 0.0)
    assert reg.confirm("new", accepted_at=201.0)  # its reply came from the restarted run
    reg.update(worker_stats("w1", max_num_seqs=4, started_at=100.0), now_wall_s=0.5)
    assert reg.expire(now_wall_s=0.6) == []  # the same run: nothing lost
    reg.update(worker_stats("w1", max_num_seqs=4, started_at=200.0), now_wall_s=1.0)
    orphans = reg.expire(now_wall_s=1.1)
    assert [o.request.request.request_id for o in orphans] == ["old"]
    assert reg.loads("p", 0.0)[0].free_slots == 3
    assert reg.expire(now_wall_s=1.2) == []


def test_silence_while_the_router_itself_was_deaf_does_not_expire_a_worker() -> None:
    """Test that a worker is timed from when the router could hear again (its own NATS
    connection back), not from its last heartbeat before the outage: their requests are not
    re-queued to run twice because the router, not the worker, was away."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(_stats("w1"), now_wall_s=0.0)
    reg.placed(_classified("a", 10), "w1", 0.0)
    assert reg.confirm("a")
    assert reg.expire(now_wall_s=5.0, heard_since_wall_s=4.0) == []  # deaf until 4.0
    assert reg.alive("w1")
    orphans = reg.expire(now_wall_s=7.5, heard_since_wall_s=4.0)  # 3.5 s heard, still silent
    assert [o.request.request.request_id for o in orphans] == ["a"]
    assert not reg.alive("w1")


class _Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_early_end_survives_a_flood_of_endings_of_requests_never_placed() -> None:
    """Test that endings the router never placed (cancels, sheds, endings sent again) do
    not push out a genuine early end still racing its placement: that placement must not
    take a slot no ending will ever free (the old set was cleared at 10,000 ids)."""
    reg = WorkerRegistry(timeout_s=3.0)  # the real clock: well within the memory
    reg.update(_stats("w1"), now_wall_s=0.0)
    reg.ended("fast")  # its ending came before the pull reply that places it
    for i in range(20_000):  # the scheduler's cancels and sheds meanwhile
        reg.ended(f"never-placed-{i}")
    assert not reg.placed(_classified("fast", 1), "w1", 0.0)
    assert reg.loads("p", 0.0)[0].free_slots == 2


def test_endings_of_requests_never_placed_expire_by_age() -> None:
    """Test that the memory of endings not held is bounded by time: ids older than the
    memory are forgotten as new endings arrive (a placement of such an id then counts),
    younger ones stay, and an id ended again is timed from its latest ending."""
    clock = _Clock()
    reg = WorkerRegistry(timeout_s=3.0, early_end_memory_s=10.0, monotonic=clock)
    reg.update(_stats("w1"), now_wall_s=0.0)
    for i in range(1_000):
        reg.ended(f"old-{i}")
    clock.now = 5.0
    reg.ended("again")
    reg.ended("young")
    clock.now = 9.0
    reg.ended("again")  # sent again: its age restarts
    assert reg.early_ends() == 1_002
    clock.now = 14.0
    reg.ended("new")
    assert reg.early_ends() == 3  # young, again and new: none of the first 1,000
    assert not reg.placed(_classified("young", 1), "w1", 0.0)
    assert not reg.placed(_classified("again", 1), "w1", 0.0)
    clock.now = 30.0
    assert reg.placed(_classified("new", 1), "w1", 0.0)  # its mark is older than 10 s
    assert reg.loads("p", 0.0)[0].free_slots == 1


def test_a_request_ended_on_a_worker_whose_gate_is_closed_frees_its_slot_at_once() -> None:
    """Test why a worker need not announce a gate reopened by a cancel or an engine error:
    its closed stats advertise its in-flight count then (no free slot), and the router's own
    count frees the ended request's slot as soon as the ending arrives, before any stats."""
    reg = WorkerRegistry(timeout_s=3.0)
    reg.update(_stats("w1", max_seqs=64), now_wall_s=0.0)
    for rid in ("a", "b", "c"):
        assert reg.placed(_classified(rid, 10), "w1", 0.0)
    closed = worker_stats("w1", pool_id="p", max_num_seqs=3, engine_max_num_seqs=64)
    reg.update(closed, now_wall_s=0.1)  # the gate refused a fourth and closed
    assert reg.loads("p", 0.0)[0].free_slots == 0
    reg.ended("b")  # cancelled: request.done, no stats
    assert reg.loads("p", 0.0)[0].free_slots == 1
