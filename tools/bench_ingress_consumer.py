"""Publish-to-hand-over latency of the ingress stream: pull fetches against the push consumer.

The classifier reads the ingress stream through a durable push consumer with a deliver group
(``services/classifier/ingress_consumer.py``) rather than ``fetch`` (a pull consumer);
docs/performance.md, "Push ingress", gives the reason. This measures the two on the bare
stream, with nothing else in the way: a real nats-server (JetStream, file storage,
work-queue retention, as ``ensure_ingress_stream`` makes it), one publisher at an open-loop
Poisson rate awaiting each publish's ack, and one consumer that acks what it takes. The
latency of a message is publish start → the consumer holds it. Both modes run against the
same fresh server per rate, alternately, so they see the same machine load.

    .venv/bin/python tools/bench_ingress_consumer.py [--rates 400,1000,2000] [--seconds 4]

Prints one JSON line: p50/p90/p99 ms per mode and rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
import nats.errors
from nats.aio.msg import Msg

from proto.subjects import Subjects
from services.classifier.ingress_consumer import (
    IngressInbox,
    consumer_config,
    ensure_ingress_consumer,
    subscribe_inbox,
)
from shared.bus import ensure_ingress_stream
from shared.servers import start_nats

__all__ = ["main"]

FETCH_BATCH = 64
"""The classifier's batch (``classifier.fetch_batch``)."""


def _quantiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    n = len(ordered)
    return {
        f"p{q}_ms": round(1000.0 * ordered[min(n - 1, int(n * q / 100))], 3) for q in (50, 90, 99)
    }


async def _run(url: str, mode: str, rate: float, seconds: float, prefix: str) -> dict[str, Any]:
    subjects = Subjects(prefix)
    publisher, consumer = await nats.connect(url), await nats.connect(url)
    latencies: list[float] = []
    total = int(rate * seconds)
    finished = asyncio.Event()
    tasks: set[asyncio.Task[Any]] = set()

    async def settle(msgs: list[Msg]) -> None:
        now = time.time()
        latencies.extend(now - float(m.data) for m in msgs)
        for m in msgs:
            await m.ack()
        if len(latencies) >= total:
            finished.set()

    try:
        js = publisher.jetstream()
        await ensure_ingress_stream(js, subjects)
        cjs = consumer.jetstream()
        if mode == "pull":
            psub = await cjs.pull_subscribe(
                subjects.ingress_wildcard, durable="pull", stream=subjects.ingress_stream
            )

            async def fetch_loop() -> None:
                while not finished.is_set():
                    try:
                        msgs = await psub.fetch(FETCH_BATCH, timeout=0.5)
                    except (nats.errors.TimeoutError, TimeoutError):
                        continue
                    task = asyncio.create_task(settle(msgs))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

            loop_task = asyncio.create_task(fetch_loop())
        else:
            config = consumer_config(subjects, ack_wait_s=30.0, max_deliver=5)
            await ensure_ingress_consumer(cjs, subjects, config)
            inbox = IngressInbox()
            await subscribe_inbox(cjs, subjects, inbox)

            async def take_loop() -> None:
                while not finished.is_set():
                    msgs = await inbox.take(FETCH_BATCH)
                    task = asyncio.create_task(settle(msgs))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

            loop_task = asyncio.create_task(take_loop())
        rng = random.Random(1)
        due = time.perf_counter()
        for _ in range(total):
            due += rng.expovariate(rate)
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(
                js.publish(subjects.ingress_request, str(time.time()).encode())
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.wait_for(finished.wait(), timeout=60.0)
        loop_task.cancel()
        await asyncio.gather(loop_task, *tasks, return_exceptions=True)
        return {"mode": mode, "rate": rate, "messages": len(latencies), **_quantiles(latencies)}
    finally:
        await publisher.close()
        await consumer.close()


async def _main(rates: list[float], seconds: float) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="gs-ingress-") as folder:
        server = start_nats(Path(folder))
        try:
            for k, rate in enumerate(rates):
                for mode in ("pull", "push"):
                    # One stream per run (its own prefix): a work-queue stream takes one
                    # consumer per subject, and no run sees another's messages.
                    prefix = f"bench{k}{mode}"
                    results.append(await _run(server.url, mode, rate, seconds, prefix))
        finally:
            server.stop()
    return results


def main() -> int:
    """Run the comparison and print it as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="400,1000,2000")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    print(json.dumps({"ingress_consumer": asyncio.run(_main(rates, args.seconds))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
