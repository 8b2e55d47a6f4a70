"""Compound faults on real NATS and Redis: a Redis that restarts empty, then a crash; a
worker frozen past its lease (issue 29).

A Redis restarted empty erased the scheduler's recovery log while the scheduler went on
from memory; a crash of the request path after that lost every request it held. A worker
frozen (SIGSTOP) past the router's heartbeat timeout had its requests run elsewhere, and
at SIGCONT ran them to the end as well: two answers for one request.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from greenserve.faults import run_scenario
from loadgen.traces import load_azure_trace, resolve_trace
from proto.codec import decode
from proto.leases import LEASE_HEADER, lease_headers
from proto.messages import Assignment, ClassifiedRequest
from services.router.service import RouterShell
from services.scheduler.service import SchedulerShell
from services.worker.backend import OutputBatch
from services.worker.factory import build_backend
from services.worker.service import WorkerShim
from shared.config import Settings
from shared.lifecycle import ServiceContext, service_context
from shared.servers import ServerProcess, start_redis
from shared.store import as_bytes
from tests.factories import classified_request, no_ready, until, worker_stats
from tests.integration.test_missed_endings import _Link

pytestmark = pytest.mark.connected

FREEZE_S = 0.4
"""How long the in-process tests stall the worker's event loop (its stale limit is half)."""


def _settings(namespace: str, nats_url: str, redis_url: str) -> Settings:
    return Settings(
        namespace=namespace,
        nats={"url": nats_url, "reconnect_wait_s": 0.1},
        redis={"url": redis_url, "socket_timeout_s": 0.5},
        worker={"backend": "instant", "admission": False},
    )


async def _until_checked(check: object, timeout_s: float = 10.0) -> int:
    """Call a store check until Redis answers it (the first call after a restart may meet
    the dead connection); return what it wrote back."""
    deadline = time.monotonic() + timeout_s
    while True:
        written = await check()  # type: ignore[operator]
        assert isinstance(written, int)
        if written or time.monotonic() > deadline:
            return written
        await asyncio.sleep(0.05)


def _restart_empty(server: ServerProcess) -> ServerProcess:
    """Kill a Redis without persistence and start a fresh one on the same port."""
    server.kill()
    return start_redis(server.workdir, server.port, aof=False)


async def test_a_scheduler_writes_its_queues_back_to_a_redis_restarted_empty(
    nats_server: ServerProcess, tmp_path: Path, namespace: str
) -> None:
    """Test that after Redis restarts empty the scheduler writes back every queued request
    (and its seen-mark), so a scheduler restarted after a crash restores them all and a
    redelivered one is still a duplicate."""
    redis = start_redis(tmp_path, aof=False)
    try:
        settings = _settings(namespace, nats_server.url, redis.url)
        requests = [classified_request(f"c.r{i}", ingress_seq=i + 1) for i in range(5)]
        async with service_context("scheduler", settings) as ctx:
            first = SchedulerShell(ctx, on_ready=no_ready)
            assert await first.check_store() == 0  # a fresh Redis: the marker is set
            assert (await first.submit(requests)).accepted == [
                r.request.request_id for r in requests
            ]
            redis = _restart_empty(redis)
            assert await ctx.redis.hlen(ctx.keys.queued) == 0
            assert await _until_checked(first.check_store) == 5
            assert await first.check_store() == 0  # written once: the marker is back
            # The scheduler crashes; its successor knows only what Redis holds.
            second = SchedulerShell(ctx, on_ready=no_ready)
            assert await second.restore() == 5
            taken, _ = await second.pull("p", 10, record=False)
            assert sorted(r.request.request_id for r in taken) == sorted(
                r.request.request_id for r in requests
            )
            again = await second.submit(requests[:1])
            assert again.duplicates == [requests[0].request.request_id]
    finally:
        redis.stop()


async def test_a_router_writes_its_placements_back_to_a_redis_restarted_empty(
    nats_server: ServerProcess, tmp_path: Path, namespace: str
) -> None:
    """Test that after Redis restarts empty the router writes back each placement it holds,
    with its worker, for a router that adopts them after a crash."""
    redis = start_redis(tmp_path, aof=False)
    try:
        settings = _settings(namespace, nats_server.url, redis.url)
        async with service_context("router", settings) as ctx:
            shell = RouterShell(ctx, _Link())
            await shell.check_store()
            shell.registry.update(worker_stats("w1", pool_id="p"), time.time())
            for rid in ("c.r1", "c.r2"):
                assert shell.registry.placed(classified_request(rid), "w1", 0.0)
                shell.registry.confirm(rid, time.time())
            redis = _restart_empty(redis)
            deadline = time.monotonic() + 10.0
            records: dict[bytes | str, bytes | str] = {}
            while not records and time.monotonic() < deadline:
                await shell.check_store()
                records = await ctx.redis.hgetall(ctx.keys.dispatched)
                await asyncio.sleep(0.05)
            held = {
                as_bytes(k).decode(): decode(as_bytes(v), Assignment).worker_id
                for k, v in records.items()
            }
            assert held == {"c.r1": "w1", "c.r2": "w1"}
    finally:
        redis.stop()


class _CheckedLink(_Link):
    """A scheduler link that notes, at each requeue, whether the worker's revocation of
    each request was already readable in Redis."""

    def __init__(self, ctx: ServiceContext, worker_id: str) -> None:
        super().__init__()
        self._ctx = ctx
        self._worker_id = worker_id
        self.revoked_first: list[bool] = []

    async def requeue(self, requests: list[ClassifiedRequest]) -> None:
        key = self._ctx.keys.revoked(self._worker_id)
        for req in requests:
            self.revoked_first.append(
                bool(await self._ctx.redis.hexists(key, req.request.request_id))
            )
        await super().requeue(requests)


async def test_a_silent_workers_requests_are_revoked_before_they_are_requeued(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that the router revokes a silent worker's accepted requests in Redis before it
    hands them back to the scheduler."""
    settings = _settings(namespace, nats_server.url, redis_server.url)
    async with service_context("router", settings) as ctx:
        link = _CheckedLink(ctx, "w1")
        shell = RouterShell(ctx, link)
        silent_since = time.time() - 2 * settings.router.worker_timeout_s
        shell.registry.update(worker_stats("w1", pool_id="p"), silent_since)
        assert shell.registry.placed(classified_request("c.r1"), "w1", 0.0)
        shell.registry.confirm("c.r1", silent_since)
        await shell.place_round()
        assert link.requeued == ["c.r1"]
        assert link.revoked_first == [True]


def _worker(ctx: ServiceContext) -> WorkerShim:
    """A worker shim on the instant backend, its engine not started (nothing finishes)."""
    return WorkerShim(ctx, build_backend(ctx.settings))


def _dispatch_msg(expires_at: float, headers: dict[str, str] | None = None) -> Msg:
    """A dispatch's NATS message with a lease ending at ``expires_at`` (wall)."""
    return Msg(
        _client=None,  # type: ignore[arg-type]  # never used to reply here
        subject="dispatch",
        headers=headers if headers is not None else lease_headers(expires_at),
    )


async def test_a_dispatch_read_after_its_lease_expired_is_refused(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that a worker refuses a dispatch whose lease ran out before it read it (and runs
    none of it), accepts one within its lease, and refuses a malformed lease clearly."""
    settings = _settings(namespace, nats_server.url, redis_server.url)
    async with service_context("worker", settings) as ctx:
        shim = _worker(ctx)
        late = await shim.on_dispatch(classified_request("c.r1"), _dispatch_msg(time.time() - 1))
        assert not late.accepted
        assert late.reason == "lease_expired"
        assert "c.r1" not in shim.book
        live = await shim.on_dispatch(classified_request("c.r2"), _dispatch_msg(time.time() + 5))
        assert live.accepted
        assert "c.r2" in shim.book
        bad = _dispatch_msg(0.0, {LEASE_HEADER: "soon"})
        refused = await shim.on_dispatch(classified_request("c.r3"), bad)
        assert not refused.accepted
        assert refused.reason.startswith("malformed lease")


async def test_a_worker_waking_from_a_freeze_aborts_what_the_router_revoked_unanswered(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that after its event loop stood still the worker reads its revocations and
    drops the requests revoked after it accepted them, sending nothing for them, keeps the
    rest, and refuses a dispatch of a revoked request sent before the revocation; while
    the loop runs it reads nothing."""
    settings = _settings(namespace, nats_server.url, redis_server.url)
    settings = settings.model_copy(
        update={
            "worker": settings.worker.model_copy(
                update={"lease_stale_after_s": FREEZE_S / 2, "lease_settle_s": 0.0}
            )
        }
    )
    async with service_context("worker", settings) as ctx:
        shim = _worker(ctx)
        sent_at = time.time()
        for rid in ("c.r1", "c.r2"):
            reply = await shim.on_dispatch(classified_request(rid), _dispatch_msg(sent_at + 10))
            assert reply.accepted
        answers: dict[str, int] = {"c.r1": 0, "c.r2": 0}

        async def on_answer(msg: Msg) -> None:
            answers[msg.subject.removeprefix("gs.v1.client.c.")] += 1

        subs = [await ctx.nc.subscribe(f"gs.v1.client.c.{rid}", cb=on_answer) for rid in answers]
        revoked = ctx.keys.revoked(settings.worker.worker_id)
        await ctx.redis.hset(revoked, mapping={"c.r1": f"{time.time() + 1:.6f}"})
        await shim.leases.hold()
        assert shim.leases.checks == 0  # no stall: nothing read
        time.sleep(FREEZE_S)  # noqa: ASYNC251 - the event loop stands still, as under SIGSTOP
        # The first thing the engine does on waking: both requests' last tokens.
        both = ("c.r1", "c.r2")
        await shim.on_output(OutputBatch(emitted=both, finished=both, at=time.time()))
        assert shim.leases.checks == 1
        stale = await shim.on_dispatch(classified_request("c.r1"), _dispatch_msg(sent_at + 10))
        assert not stale.accepted
        assert stale.reason == "lease_revoked"
        await ctx.nc.flush()
        await until(lambda: answers["c.r2"] >= 2)  # its chunk and its completion
        assert answers["c.r1"] == 0
        for sub in subs:
            await sub.unsubscribe()


@pytest.mark.parametrize(
    ("scenario", "requests"),
    [
        # Long enough that requests are still sent after the request path's restart (the
        # wipe, 3 s and its 1-s downtime come a third of the way in).
        ("restart:redis+kill:requestpath", 300),
        ("freeze:worker-0", 150),
    ],
)
async def test_compound_fault_during_replay_loses_and_duplicates_nothing(
    scenario: str, requests: int
) -> None:
    """Test that Redis restarted empty then the request path killed 3 s later, and a worker
    frozen 20 s, each end with every request answered exactly once and nothing left over."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=requests)
    outcome = await asyncio.to_thread(run_scenario, scenario, trace)
    assert outcome.lost == 0, outcome
    assert outcome.duplicated == 0, outcome
    assert outcome.completed == len(trace), outcome
    assert outcome.leftover_records == 0, outcome
    assert outcome.recovery_s is not None, outcome
