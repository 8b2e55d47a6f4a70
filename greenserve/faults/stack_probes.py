"""What a scenario reads from the stack it runs on: what the ingress stream holds, what is
placed on a host's workers, and the records left once the replay ended."""

from __future__ import annotations

import asyncio
import contextlib
import time

from nats.aio.client import Client

from greenserve.faults.scenario_names import MULTIHOST_HOSTS
from greenserve.local import LocalStack
from greenserve.multihost.stack import host_of
from proto.codec import DecodeError, decode_any
from proto.keys import Keys
from proto.messages import Assignment
from proto.subjects import Subjects
from shared.store import as_bytes

__all__ = ["CONSISTENT_WITHIN_S", "ingress_held", "leftover_records", "placed_on"]

CONSISTENT_WITHIN_S = 12.0
"""After the replay ends, how long the stack may take to forget every ended request: two
periods of the scheduler's audit of endings it never heard (``shared/ended_lookup.py``)."""


async def ingress_held(nc: Client, namespace: str) -> int:
    """Messages the ingress stream holds now (work-queue retention: stored, not yet acked)."""
    info = await nc.jetstream().stream_info(Subjects(namespace).ingress_stream)
    return int(info.state.messages)


async def placed_on(stack: LocalStack, namespace: str, host: str) -> int:
    """Requests recorded as placed on a worker of ``host`` (``host-<i>``) now."""
    index = int(host.rpartition("-")[2])
    hosts = MULTIHOST_HOSTS
    redis = stack.state.redis_client(read_timeout_s=2.0)
    try:
        raw = await redis.hvals(Keys(namespace).dispatched)
    finally:
        await redis.aclose()
    placed = 0
    for value in raw:
        with contextlib.suppress(DecodeError):
            assignment = decode_any(as_bytes(value))
            if isinstance(assignment, Assignment):
                placed += host_of(assignment.worker_id, hosts) == index
    return placed


async def leftover_records(stack: LocalStack, namespace: str, within_s: float) -> int:
    """Requests still in ``queued`` or ``dispatched`` once ``within_s`` has passed (0 as soon
    as both are empty), read from the stack's primary (after a failover, the promoted one)."""
    keys = Keys(namespace)
    redis = stack.state.redis_client(read_timeout_s=2.0)
    try:
        deadline = time.monotonic() + within_s
        while True:
            left = int(await redis.hlen(keys.queued)) + int(await redis.hlen(keys.dispatched))
            if left == 0 or time.monotonic() >= deadline:
                return left
            await asyncio.sleep(0.2)
    finally:
        await redis.aclose()
