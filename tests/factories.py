"""Factories for tests: one place that builds valid protocol messages and service settings.

Every field has a plausible default; tests name only what they are about.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import pandas as pd
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from proto.codec import decode_any
from proto.messages import ClassifiedRequest, ErrorReply, Request, WorkerStats
from proto.subjects import Subjects
from services.forecaster.sources import CarbonHistory
from shared.config import Settings
from shared.servers import ServerProcess

__all__ = [
    "classified_request",
    "client_request",
    "connected_settings",
    "error_replies",
    "no_ready",
    "until",
    "worker_stats",
]


def classified_request(
    rid: str,
    *,
    prompt_tokens: int = 10,
    output_tokens: int = 5,
    predicted_output_tokens: int | None = None,
    prompt: str | None = None,
    **fields: Any,
) -> ClassifiedRequest:
    """A classified request for ``rid``; ``fields`` override any ClassifiedRequest field."""
    request = Request(
        request_id=rid,
        model="llama-3-8b",
        reply_subject=f"gs.v1.client.c.{rid}",
        sent_at=0.0,
        max_tokens=output_tokens,
        prompt_tokens=prompt_tokens,
        prompt=prompt,
    )
    values: dict[str, Any] = {
        "request": request,
        "input_tokens": prompt_tokens,
        "predicted_output_tokens": predicted_output_tokens or output_tokens,
        "request_class": "SS",
        "pool_id": "p",
        "region": "PJM",
        "arrival_s": 0.0,
        "ttft_slo_ms": 250.0,
        "tbt_slo_ms": 100.0,
        "profile_ttft_ms": 50.0,
        "profile_tbt_ms": 10.0,
        "lat_s": 1.0,
        "deadline_s": 1.4,
        "classified_at": 0.0,
    }
    values.update(fields)
    return ClassifiedRequest(**values)


def client_request(
    subjects: Subjects, client: str, rid: str, *, output_tokens: int = 5
) -> ClassifiedRequest:
    """Client ``client``'s request ``rid`` as the stack carries it: the id scoped by the
    client, its reply subject the client's, a deadline that never passes."""
    req = classified_request(f"{client}.{rid}", output_tokens=output_tokens, deadline_s=1e12)
    return msgspec.structs.replace(
        req,
        request=msgspec.structs.replace(
            req.request, reply_subject=subjects.client_reply(client, rid), client_id=client
        ),
    )


async def error_replies(nc: Client, subject: str) -> tuple[list[ErrorReply], Subscription]:
    """Collect the ``ErrorReply`` messages published on ``subject`` (flushed: listening
    before this returns); unsubscribe when done."""
    replies: list[ErrorReply] = []

    async def on_message(msg: Msg) -> None:
        reply = decode_any(msg.data)
        if isinstance(reply, ErrorReply):
            replies.append(reply)

    sub = await nc.subscribe(subject, cb=on_message)
    await nc.flush()
    return replies, sub


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait until ``check()`` holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def worker_stats(worker_id: str = "w", **fields: Any) -> WorkerStats:
    """A worker heartbeat; ``fields`` override any WorkerStats field."""
    values: dict[str, Any] = {
        "worker_id": worker_id,
        "pool_id": "p",
        "region": "PJM",
        "node_id": "n",
        "gpu": "A100-80GB",
        "model": "llama-3-8b",
        "tp": 1,
        "running": 0,
        "waiting": 0,
        "max_num_seqs": 8,
        "free_slots": 8,
        "kv_blocks_used": 0,
        "kv_blocks_total": 100,
        "clock_mhz": 1410.0,
        "power_w": 0.0,
        "energy_j": 0.0,
        "tokens_out": 0,
        "at": 0.0,
    }
    values.update(fields)
    return WorkerStats(**values)


def connected_settings(namespace: str, nats: ServerProcess, redis: ServerProcess) -> Settings:
    """Settings of a service on the suite's own servers, in the test's namespace."""
    return Settings(namespace=namespace, nats={"url": nats.url}, redis={"url": redis.url})


async def no_ready(_pool_id: str) -> None:
    """A scheduler ``on_ready`` hook that does nothing (no router listens in the test)."""


def intensity_history(
    values: np.ndarray, start: pd.Timestamp, region: str = "SYN"
) -> CarbonHistory:
    """An hourly intensity history (no fuel mix) of ``values`` from ``start``."""
    index = pd.date_range(start, periods=len(values), freq="h", tz="UTC")
    return CarbonHistory(
        region=region,
        intensity=pd.Series(values, index=index),
        fuel_mix=None,
        signal="average",
        emission_factor="lifecycle",
        source="synthetic",
    )
