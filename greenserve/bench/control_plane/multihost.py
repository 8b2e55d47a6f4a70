"""``greenserve bench control-plane --multihost``: the control plane over three hosts.

The separate request path (classifier, scheduler, router as three processes) runs on the
network-namespace hosts of :mod:`greenserve.multihost`, with 1, 2 and 3 classifier
replicas (one per host, all in the ingress consumer's deliver group: a queue group, one
stack, not cells); the scheduler and the router stay one each, as their queues and
records are one per stack. The same stack on one host is swept first in the same run,
with one NATS server and one Redis, then with the hosts' replicated servers (three NATS
nodes, every stream R3; a Redis replica and Sentinels), so the table tells what the
replication costs from what the network between hosts costs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from greenserve.bench.control_plane.cpu import named_pids, wait_quiet
from greenserve.bench.control_plane.run import spec_for, sweep
from greenserve.local import LocalStack, start_local_stack
from greenserve.multihost.fabric import Fabric, fabric
from greenserve.multihost.stack import start_multihost_stack

__all__ = ["HOSTS", "multihost_table"]

HOSTS = 3


def _starter(hosts: Fabric, workers: int, classifiers: int) -> Callable[[Path], list[LocalStack]]:
    """Start the stack on ``hosts`` and let it settle, as ``sweep`` does its own."""

    def start(folder: Path) -> list[LocalStack]:
        spec = spec_for(workers, "separate")
        stack = start_multihost_stack(spec, hosts, folder, classifiers=classifiers)
        try:
            stack.wait_ready()
            wait_quiet(list(named_pids([stack]).values()))
        except BaseException:
            stack.stop()
            raise
        return [stack]

    return start


def _replicated(workers: int) -> Callable[[Path], list[LocalStack]]:
    """The same servers as on the hosts (three NATS nodes, every stream R3; Redis with a
    replica and Sentinels) on this one host: what replication costs without the network."""

    def start(folder: Path) -> list[LocalStack]:
        spec = spec_for(workers, "separate")
        stack = start_local_stack(spec, folder, nats_cluster=HOSTS, redis_sentinel=True)
        try:
            stack.wait_ready()
            wait_quiet(list(named_pids([stack]).values()))
        except BaseException:
            stack.stop()
            raise
        return [stack]

    return start


def _row(where: str, replicas: int, run: dict[str, Any]) -> dict[str, Any]:
    return {
        "where": where,
        "request_path_replicas": replicas,
        "sustained_rps": run["sustained_rps"],
        "p99_added_ms": run["p99_added_ms"],
        "cpu_cores": run["cpu_cores"],
    }


def multihost_table(
    workers: int,
    rates: list[float],
    step_s: float,
    replicas: list[int],
    delays_ms: Sequence[float] = (),
    hops: bool = False,
) -> dict[str, Any]:
    """One host first, then each replica count on :data:`HOSTS` hosts (host i delaying what
    it sends by ``delays_ms[i]``); the table and runs, with per-hop latencies if ``hops``."""
    print("one host, separate request path", file=sys.stderr, flush=True)
    single = sweep(spec_for(workers, "separate"), rates, step_s, hops)
    print("one host, NATS cluster and Redis Sentinels", file=sys.stderr, flush=True)
    replicated = sweep(
        spec_for(workers, "separate"), rates, step_s, hops, start=_replicated(workers)
    )
    rows = [_row("one host", 1, single), _row("one host, replicated servers", 1, replicated)]
    runs: dict[str, dict[str, Any]] = {
        "one host": single,
        "one host, replicated servers": replicated,
    }
    with fabric(HOSTS, delays_ms) as hosts:
        delay_by = next((h.delay_by for h in hosts.hosts if h.delay_by), "")
        for count in replicas:
            label = f"{HOSTS} hosts, {count} classifier replica{'s' if count > 1 else ''}"
            print(label, file=sys.stderr, flush=True)
            run = sweep(
                spec_for(workers, "separate"),
                rates,
                step_s,
                hops,
                start=_starter(hosts, workers, count),
            )
            rows.append(_row(f"{HOSTS} hosts", count, run))
            runs[label] = run
    return {
        "multihost": True,
        "hosts": HOSTS,
        "delays_ms": list(delays_ms),
        "delay_by": delay_by,
        "machine_cores": len(os.sched_getaffinity(0)),
        "request_path": "separate",
        "table": rows,
        "runs": runs,
    }
