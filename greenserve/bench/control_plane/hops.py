"""Per-hop latency of stamped requests: where between publish and reply the time goes.

``--hops`` stamps every request at each hop on its way (ingress, classifier, scheduler,
router, worker, client); :func:`hop_breakdown` turns the stamps into per-hop percentiles,
and the e2e request-path tests and the plots read :data:`HOPS` for the same names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.replay import ClientRecord

__all__ = ["HOPS", "hop_breakdown"]


HOPS = (
    ("ack", "pub", "ack"),
    ("ingress", "pub", "fetch"),
    ("classify", "fetch", "submit"),
    ("queue", "submit", "pull"),
    ("store", "submit", "stored"),
    ("wake", "stored", "pull"),
    ("place", "pull", "dispatch"),
    ("dispatch", "dispatch", "accepted"),
    ("worker", "accepted", "done"),
    ("reply", "done", "recv"),
)
"""(gap, from stamp, to stamp). ``ack``: JetStream publish → its ack at the client (beside
the path, not on it); ``ingress``: publish → the classifier's fetch returned the message;
``classify``: classify and validate; ``queue``: hand-off to the scheduler (Redis), its ready
signal and the router's pull, split (co-located path only) into ``store`` (the Redis
write, submit → stored) and ``wake`` (stored → the router's pull); ``place``: placement
and any wait for the worker's previous batch in flight; ``dispatch``: router → worker
(NATS); ``worker``: backend and completion publish;
``reply``: completion → client (NATS)."""


def hop_breakdown(records: list[ClientRecord]) -> dict[str, Any] | None:
    """Per-hop p50/p99 (ms) of stamped requests, and the mean gaps of the slowest 1 %."""
    stamped = [r for r in records if r.completion is not None and "recv" in r.hops]
    if not stamped:
        return None
    for r in stamped:
        r.hops["accepted"] = r.completion.accepted_at if r.completion else 0.0
    # A hop is reported where every request carries both its stamps: ``store`` and ``wake``
    # split the queue inside the co-located process, and the separate path has no ``stored``.
    gaps = {
        name: np.array([(r.hops[b] - r.hops[a]) * 1000.0 for r in stamped])
        for name, a, b in HOPS
        if all(a in r.hops and b in r.hops for r in stamped)
    }
    total = np.array([(r.hops["recv"] - r.hops["pub"]) * 1000.0 for r in stamped])
    slow = total >= np.percentile(total, 99)
    return {
        "requests": len(stamped),
        "p50_ms": {k: float(np.percentile(v, 50)) for k, v in gaps.items()},
        "p99_ms": {k: float(np.percentile(v, 99)) for k, v in gaps.items()},
        "max_ms": {k: float(v.max()) for k, v in gaps.items()},
        # Where the slowest 1 % spent their time: the hop that holds them.
        "slowest_1pct_mean_ms": {k: float(v[slow].mean()) for k, v in gaps.items()},
        "slowest_1pct_total_ms": float(total[slow].mean()),
    }
