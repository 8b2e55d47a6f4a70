"""The fuzz bench's live cancel target (``greenserve bench fuzz``, ``cancel``).

Cancels are fire and forget, so a case is answered when its documented treatment shows in
the stack's own records: the scheduler's and every worker's malformed counter, or the
scheduler's Redis cancel mark; an ordinary request afterwards must still complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

from greenserve.bench.fuzz.cases import OK
from proto.codec import DecodeError, decode_any
from shared.loops import wait_event

__all__ = ["fuzz_cancels"]


def _malformed(service: str) -> float:
    """``greenserve_errors_total{service=<service>, code="malformed"}`` of this process
    (the embedded stack runs in it, so the registry is the services' own; workers of one
    stack share their label, so theirs is the sum over them)."""
    from prometheus_client import REGISTRY

    labels = {"service": service, "code": "malformed"}
    return REGISTRY.get_sample_value("greenserve_errors_total", labels) or 0.0


async def _probe_request(nc: Any, prefix: str, model: str, timeout_s: float) -> str | None:
    """Publish one ordinary request as client ``fzprobe``; its ending code, None if none."""
    from proto.codec import encode
    from proto.messages import Completion, ErrorReply, Request
    from proto.subjects import Subjects

    subjects = Subjects(prefix)
    client, rid = "fzprobe", f"probe-{time.time_ns()}"
    ending: list[str] = []
    ended = asyncio.Event()

    async def on_reply(msg: Any) -> None:
        with contextlib.suppress(DecodeError):
            message = decode_any(msg.data)
            if isinstance(message, ErrorReply | Completion):
                ending.append(message.code if isinstance(message, ErrorReply) else "completed")
                ended.set()

    sub = await nc.subscribe(subjects.client_reply(client, rid), cb=on_reply)
    request = Request(
        request_id=rid,
        model=model,
        reply_subject=subjects.client_reply(client, rid),
        sent_at=time.time(),
        max_tokens=8,
        prompt_tokens=16,
        client_id=client,
    )
    await nc.jetstream().publish(
        subjects.ingress_client(client), encode(request), headers={"Nats-Msg-Id": rid}
    )
    await wait_event(ended, timeout_s)
    await sub.unsubscribe()
    return ending[0] if ending else None


async def fuzz_cancels(
    nc: Any,
    redis_url: str,
    prefix: str,
    cases: list[tuple[str, bytes]],
    model: str,
    timeout_s: float,
    workers: int,
) -> dict[str, Any]:
    """Publish each case on ``cancel.client.<token>``; check its documented treatment.

    Cancels are fire and forget: no reply exists to wait for, so a case counts as answered
    when the stack's own record of it appears. A malformed one (``cancelled_id`` gives None:
    the payload is no valid ``CancelRequest`` or the token no client id) moves the
    scheduler's ``greenserve_errors_total{code="malformed"}`` by one; a well-formed one
    (naming a request nobody holds: a no-op for the request path) leaves the scheduler's
    ``cancelled(<client>.<id>)`` mark in Redis; each of the ``workers`` counts a malformed
    one too. *Unanswered*: the difference between the malformed cases and the scheduler
    counter's move, either way, and between them and the workers' move ÷ ``workers``
    (rounded up), plus the well-formed ones without a mark. Then one ordinary request must
    still complete (else one more unanswered).
    """
    from proto.keys import Keys
    from proto.subjects import Subjects
    from services.scheduler.service import NAME as SCHEDULER
    from services.worker.service import NAME as WORKER
    from shared.cancels import cancelled_id
    from shared.config import RedisSettings
    from shared.store import connect_redis

    subjects, keys = Subjects(prefix), Keys(prefix)
    base = subjects.cancel_wildcard.removesuffix("*")  # Subjects.cancel refuses hostile tokens
    before, before_workers = _malformed(SCHEDULER), _malformed(WORKER)
    malformed: list[bytes] = []
    marked: list[tuple[str, str]] = []  # (Redis key of its mark, what to show if missing)
    refused_by_bus = 0
    for i, (token, payload) in enumerate(cases):
        subject = base + (f"fzc{i}" if token == OK else token)
        rid = cancelled_id(subject, payload)  # the receivers' own reading decides the treatment
        try:
            await nc.publish(subject, payload)
        except Exception:  # too big for the bus: the sender hears it at once
            refused_by_bus += 1
            continue
        if rid is None:
            malformed.append(payload)
        else:
            marked.append((keys.cancelled(rid), f"{subject[len(base) :]!r}: {payload[:160]!r}"))
    await nc.flush()
    redis = connect_redis(RedisSettings(url=redis_url))
    try:
        missing = marked
        deadline = time.monotonic() + timeout_s
        while True:
            counted = _malformed(SCHEDULER) - before
            by_workers = _malformed(WORKER) - before_workers
            pipe = redis.pipeline(transaction=False)
            for key, _ in missing:
                pipe.exists(key)
            found = await pipe.execute()
            missing = [case for case, n in zip(missing, found, strict=True) if not n]
            counted_all = counted >= len(malformed) and by_workers >= workers * len(malformed)
            if (counted_all and not missing) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    finally:
        await redis.aclose()
    probe = await _probe_request(nc, prefix, model, timeout_s)
    miscounted = abs(round(counted) - len(malformed))
    workers_miscounted = math.ceil(abs(round(by_workers) - workers * len(malformed)) / workers)
    return {
        "cases": len(cases),
        "unanswered": miscounted + workers_miscounted + len(missing) + int(probe != "completed"),
        "refused_by_bus": refused_by_bus,
        "malformed": len(malformed),
        "counted_malformed": round(counted),
        "workers_counted_malformed": round(by_workers),
        "workers": workers,
        "well_formed": len(marked),
        "unmarked": len(missing),
        "probe": probe,
        "examples": [shown for _, shown in missing[:5]],
    }
