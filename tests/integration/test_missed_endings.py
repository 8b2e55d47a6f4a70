"""Endings the bookkeeping never heard (a ``request.done`` lost to a NATS outage or a dead
subscriber), found in the workers' ended records on a real Redis: the router frees their
slots and does not re-queue them, the scheduler forgets their records, a restarted router
does not adopt them (``shared/ended_lookup.py``)."""

from __future__ import annotations

import asyncio
import time

import pytest

from proto.codec import encode
from proto.keys import Keys
from proto.messages import UNPLACED_WORKER, Assignment, ClassifiedRequest
from services.router.service import RouterShell
from services.scheduler.service import SchedulerShell
from shared.config import RedisSettings, Settings
from shared.ended_lookup import ended_among
from shared.lifecycle import ServiceContext, service_context
from shared.servers import ServerProcess
from shared.store import as_bytes, connect_redis
from tests.factories import classified_request, connected_settings, no_ready, worker_stats

pytestmark = pytest.mark.connected

AUDIT_S = 0.2


class _Link:
    """A scheduler link that records what the router hands back."""

    records_pull = True

    def __init__(self) -> None:
        self.requeued: list[str] = []
        self.unheard: list[str] = []

    async def pull(self, pool_id: str, slots: int) -> tuple[list[ClassifiedRequest], int]:
        return [], 0

    async def requeue(self, requests: list[ClassifiedRequest]) -> None:
        self.requeued += [r.request.request_id for r in requests]

    def ended_unheard(self, request_ids: list[str]) -> None:
        self.unheard += request_ids


def _settings(namespace: str, nats: ServerProcess, redis: ServerProcess) -> Settings:
    base = connected_settings(namespace, nats, redis)
    return base.model_copy(
        update={
            "router": base.router.model_copy(
                update={"ended_audit_period_s": AUDIT_S, "worker_timeout_s": AUDIT_S}
            ),
            "scheduler": base.scheduler.model_copy(update={"ended_audit_period_s": AUDIT_S}),
        }
    )


def _place(shell: RouterShell, worker_id: str, *request_ids: str) -> None:
    """Placements the worker accepted (as after a dispatch reply)."""
    for rid in request_ids:
        assert shell.registry.placed(classified_request(rid), worker_id, 0.0)
        assert shell.registry.confirm(rid, time.time())


async def _router_on_w1(
    ctx: ServiceContext, *, placed: tuple[str, ...], ended: str
) -> tuple[_Link, RouterShell]:
    """A router with worker ``w1`` (4 slots) holding ``placed``, accepted; ``w1``'s ended
    record names ``ended``."""
    link = _Link()
    shell = RouterShell(ctx, link)
    shell.registry.update(worker_stats("w1", pool_id="p", max_num_seqs=4), time.time())
    _place(shell, "w1", *placed)
    await ctx.redis.zadd(ctx.keys.ended("w1"), {ended: time.time()})
    return link, shell


def _free_slots(shell: RouterShell) -> int:
    return sum(w.free_slots for w in shell.registry.loads("p", 0.0))


async def test_the_lookup_names_only_what_each_worker_ended(
    redis_server: ServerProcess, namespace: str
) -> None:
    """Test ended_among: per worker, unknown ids and workers absent; Redis away is None."""
    redis = connect_redis(RedisSettings(url=redis_server.url))
    keys = Keys(namespace)
    try:
        await redis.zadd(keys.ended("w1"), {"a": 1.0, "b": 2.0})
        await redis.zadd(keys.ended("w2"), {"c": 3.0})
        pairs = [("a", "w1"), ("c", "w1"), ("c", "w2"), ("d", "w2"), ("e", "w9")]
        assert await ended_among(redis, keys, pairs) == {"a", "c"}
        assert await ended_among(redis, keys, [("c", "w1")]) == set()
        assert await ended_among(redis, keys, []) == set()
    finally:
        await redis.aclose()
    gone = connect_redis(RedisSettings(url="redis://127.0.0.1:1/0"))
    try:
        assert await ended_among(gone, keys, pairs) is None
    finally:
        await gone.aclose()


async def test_the_router_frees_slots_of_endings_it_never_heard(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test the audit: an accepted placement older than a period that its worker ended is
    freed and handed to the scheduler link; a young one and one still running stay."""
    async with service_context("router", _settings(namespace, nats_server, redis_server)) as ctx:
        link, shell = await _router_on_w1(ctx, placed=("lost-done", "running"), ended="lost-done")
        await shell.audit_endings()
        assert link.unheard == []  # younger than one period: its done may still come
        assert _free_slots(shell) == 2
        await asyncio.sleep(AUDIT_S * 1.5)
        _place(shell, "w1", "young")
        await ctx.redis.zadd(ctx.keys.ended("w1"), {"young": time.time()})
        await shell.audit_endings()
        assert link.unheard == ["lost-done"]
        assert _free_slots(shell) == 2  # "running" and "young" hold theirs
        assert link.requeued == []


async def test_orphans_of_a_silent_worker_that_it_had_ended_are_not_run_again(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a silent worker's placements go back to the queue except those its record
    names as ended (they were answered; their done event was lost)."""
    async with service_context("router", _settings(namespace, nats_server, redis_server)) as ctx:
        link, shell = await _router_on_w1(ctx, placed=("answered", "unfinished"), ended="answered")
        await asyncio.sleep(AUDIT_S * 1.5)  # past the heartbeat timeout
        await shell.place_round()
        assert link.requeued == ["unfinished"]
        assert link.unheard == ["answered"]


async def test_a_restarted_router_does_not_adopt_what_its_worker_ended(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test adoption: a recorded placement the worker's record names is deleted, not sent
    again; the other is adopted (and, with no worker to answer, re-queued)."""
    async with service_context("router", _settings(namespace, nats_server, redis_server)) as ctx:
        records = {
            rid: encode(
                Assignment(request=classified_request(rid), worker_id="w1", dispatched_at=1.0)
            )
            for rid in ("ended-unheard", "in-flight")
        }
        await ctx.redis.hset(ctx.keys.dispatched, mapping=records)  # type: ignore[arg-type]
        await ctx.redis.zadd(ctx.keys.ended("w1"), {"ended-unheard": time.time()})
        link = _Link()
        shell = RouterShell(ctx, link)
        assert await shell.adopt() == 1
        assert await ctx.redis.hkeys(ctx.keys.dispatched) == [b"in-flight"]
        for _ in range(100):  # its dispatch finds no worker, and it goes back to the queue
            if link.requeued:
                break
            await asyncio.sleep(0.05)
        assert link.requeued == ["in-flight"]


async def test_the_scheduler_forgets_records_of_endings_it_never_heard(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test the scheduler's audit: an old placement record its worker ended is deleted; a
    young one, one still running and a pulled-but-unplaced one stay."""
    async with service_context("scheduler", _settings(namespace, nats_server, redis_server)) as ctx:
        old, young = time.time() - 10 * AUDIT_S, time.time()
        records = {
            "ended-unheard": Assignment(
                request=classified_request("ended-unheard"), worker_id="w1", dispatched_at=old
            ),
            "running": Assignment(
                request=classified_request("running"), worker_id="w1", dispatched_at=old
            ),
            "young": Assignment(
                request=classified_request("young"), worker_id="w1", dispatched_at=young
            ),
            "unplaced": Assignment(
                request=classified_request("unplaced"),
                worker_id=UNPLACED_WORKER,
                dispatched_at=old,
            ),
        }
        await ctx.redis.hset(
            ctx.keys.dispatched,
            mapping={rid: encode(a) for rid, a in records.items()},
        )
        await ctx.redis.zadd(
            ctx.keys.ended("w1"), {"ended-unheard": time.time(), "young": time.time()}
        )
        scheduler = SchedulerShell(ctx, on_ready=no_ready)
        await scheduler.audit_endings()
        await scheduler.forget_ended()
        left = sorted(as_bytes(k).decode() for k in await ctx.redis.hkeys(ctx.keys.dispatched))
        assert left == ["running", "unplaced", "young"]


async def test_a_pulled_request_that_already_ended_is_not_dispatched(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a request whose ending reached the router before its pull did (a cancel
    while the pull's reply was on the wire) takes no slot and goes to no worker."""

    class _Pulls(_Link):
        async def pull(self, pool_id: str, slots: int) -> tuple[list[ClassifiedRequest], int]:
            return [classified_request("ended"), classified_request("live")], 0

    async with service_context("router", _settings(namespace, nats_server, redis_server)) as ctx:
        link = _Pulls()
        shell = RouterShell(ctx, link)
        shell.registry.update(worker_stats("w1", pool_id="p", max_num_seqs=4), time.time())
        assert shell.registry.ended("ended") is None  # remembered as an early end
        shell._start_senders = lambda worker_ids: None  # type: ignore[method-assign]
        await shell._place_pool("p")
        sent = [r.request.request_id for r in shell._outbox.get("w1", [])]
        assert sent == ["live"]
        assert _free_slots(shell) == 3
        assert link.requeued == []
