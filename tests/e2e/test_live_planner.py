"""End-to-end: the MILP planner plans a 2-region stack from live inputs; workers follow it."""

from __future__ import annotations

import time

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec, pool_id_for, stack_launches
from loadgen.replay import replay
from loadgen.report import build_report
from loadgen.traces import load_azure_trace, resolve_trace
from proto.codec import decode
from proto.messages import Plan, WorkerStats
from proto.subjects import Subjects
from shared.bus import connect_nats
from shared.clock import ModelClock
from shared.config import NatsSettings
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected

SPEEDUP = 20.0
ORIGIN_MODEL_S = 1_656_633_600.0
"""2022-07-01 00:00 UTC: CISO's grid (~210 g/kWh) is far cleaner than PJM's (~395 g/kWh)."""


async def test_milp_plan_routes_to_the_cleaner_region_and_parks_spare_workers(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that the live MILP plan sends most capacity to CISO, parks workers, loses nothing."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=450)
    origin = time.time()
    spec = StackSpec(
        namespace=namespace,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        workers=4,
        regions=("PJM", "CISO"),
        speedup=SPEEDUP,
        origin_wall_s=origin,
        extra={"planner": {"mode": "milp", "epoch_s": 60.0, "republish_wall_s": 0.25}},
    )
    subjects = Subjects(namespace)
    plans: list[Plan] = []
    parked: set[str] = set()

    async def on_plan(msg: Msg) -> None:
        plans.append(decode(msg.data, Plan))

    async def on_stats(msg: Msg) -> None:
        stats = decode(msg.data, WorkerStats)
        if stats.draining:
            parked.add(stats.worker_id)

    nc: Client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
    try:
        await nc.subscribe(subjects.plan, cb=on_plan)
        await nc.subscribe(subjects.worker_stats_wildcard, cb=on_stats)
        async with run_in_process(stack_launches(spec)):
            result = await replay(nc, subjects, trace, model=spec.model, speedup=SPEEDUP)
    finally:
        await nc.close()

    report = build_report(result, ModelClock(SPEEDUP, origin, ORIGIN_MODEL_S))
    assert report["completed"] == len(trace), report["errors"]
    assert report["lost"] == 0
    assert report["failed"] == 0
    milp = [p for p in plans if p.objective == "carbon"]
    assert milp, f"no MILP plan among {[p.objective for p in plans]}"
    ciso, pjm = pool_id_for("CISO", spec.gpu), pool_id_for("PJM", spec.gpu)
    for plan in milp:
        weights = {w.pool_id: w.weight for w in plan.routes["*"]}
        assert weights.get(ciso, 0.0) >= weights.get(pjm, 0.0)
    instances = [{p.pool_id: p.instances for p in plan.pools} for plan in milp]
    assert any(n[ciso] > n[pjm] and sum(n.values()) < spec.workers for n in instances)
    assert parked, "no worker parked"
    first_milp_at = min(p.issued_at for p in milp)
    later = [
        r.completion
        for r in result.records
        if r.completion is not None and r.completion.sent_at > first_milp_at + 1.0
    ]
    assert later
    in_ciso = sum(1 for done in later if done.region == "CISO")
    assert in_ciso > len(later) / 2
