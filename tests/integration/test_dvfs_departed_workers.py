"""The dvfs agent forgets a worker that stopped sending heartbeats.

It kept every worker it had ever heard: each control period it still reported the departed
GPU's last power in its DvfsReport and still sent it clock commands (a hung worker's each
waited out the request timeout, in series with every other worker's control).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.aio.msg import Msg

from proto.codec import decode, encode
from proto.messages import DvfsReport
from proto.subjects import Subjects
from services.dvfs.service import serve
from shared.config import Settings
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests.factories import worker_stats

pytestmark = pytest.mark.connected


async def test_a_worker_silent_past_its_heartbeat_ttl_leaves_the_reports(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that the report lists a worker while it beats and not after its TTL."""
    subjects = Subjects(namespace)
    settings = Settings(
        namespace=namespace,
        nats={"url": nats_server.url},
        redis={"url": redis_server.url},
        dvfs={"node_id": "n", "mode": "fixed", "period_s": 0.1},
        worker={"heartbeat_ttl_s": 0.5},
    )
    reports: list[tuple[float, DvfsReport]] = []

    async def on_report(msg: Msg) -> None:
        reports.append((time.monotonic(), decode(msg.data, DvfsReport)))

    async with service_context("dvfs", settings) as ctx:
        await ctx.nc.subscribe(subjects.dvfs_report("n"), cb=on_report)
        agent = asyncio.create_task(serve(ctx))
        try:
            await asyncio.sleep(0.3)  # subscribed
            stats = worker_stats("w1", node_id="n", power_w=300.0, at=time.time())
            await ctx.nc.publish(subjects.worker_stats("p", "n", "w1"), encode(stats))
            heard_at = time.monotonic()
            await asyncio.sleep(1.5)
        finally:
            ctx.stop.set()
            await asyncio.wait_for(agent, 5.0)
    listed = [at - heard_at for at, r in reports if any(g.worker_id == "w1" for g in r.gpus)]
    assert listed, "the agent never heard the worker"
    assert max(listed) < 1.0  # TTL 0.5 s plus a control period or two
    assert [r for at, r in reports if at - heard_at > 1.0 and r.gpus] == []
