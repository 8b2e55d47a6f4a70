"""What a process wake-up costs on this host, in CPU: the floor under the request path.

Every hop of a request between processes (load generator → nats-server → request path →
Redis → worker → nats-server → client) is a socket write that wakes a sleeping reader.
This measures, in one process and a forked reader, the CPU (user + system) of:

* ``sleep_1ms``: one 1 ms sleep (a timer wake-up, no I/O);
* ``write_to_sleeping_reader``: one 200-byte loopback TCP write to a reader that sleeps in
  ``recv`` between writes (writes 1 ms apart), the sleep's own cost subtracted;
* ``write_burst``: the same write back to back (the reader stays awake, writes coalesce);
* ``round_trip``: the *latency* of one hop and back: a 200-byte write that a sleeping
  reader echoes, timed from the write to the echo's arrival, p50 and p99 over writes 1 ms
  apart (both sides asleep in between). Half of it is the wall time one process hand-off
  costs before any Python runs, which is what a request's five to ten hops pay in latency.

On the shared 2-core development VM a sleep costs ≈ 35 µs and a write to a
sleeping reader ≈ 15-25 µs more, against ≈ 1 µs in a burst: per request, the stack pays
for wake-ups far more than for its Python (docs/performance.md, "The idle floor").

    python tools/measure_wakeup_cost.py [--writes 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import time
from collections.abc import Iterator

__all__ = ["main"]

MESSAGE = b"x" * 200


def _cpu_us() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1e6


def _sleeps(n: int) -> float:
    start = _cpu_us()
    for _ in range(n):
        time.sleep(0.001)
    return (_cpu_us() - start) / n


@contextlib.contextmanager
def _peer(echo: bool) -> Iterator[socket.socket]:
    """A loopback connection to a forked process that drains (or echoes) what it reads until
    the connection closes; yields the writer's end, with Nagle off."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    pid = os.fork()
    if pid == 0:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(65536):
            if echo:
                conn.sendall(data)
        os._exit(0)
    sender = socket.create_connection(server.getsockname())
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        yield sender
    finally:
        sender.close()
        os.waitpid(pid, 0)
        server.close()


def _writes(n: int, gap_s: float) -> float:
    with _peer(echo=False) as sender:
        start = _cpu_us()
        for _ in range(n):
            sender.send(MESSAGE)
            if gap_s:
                time.sleep(gap_s)
        return (_cpu_us() - start) / n


def _round_trips(n: int, gap_s: float) -> tuple[float, float]:
    """p50 and p99 (µs) of write → echo received, with both processes asleep between."""
    samples = []
    with _peer(echo=True) as sender:
        for _ in range(n):
            start = time.perf_counter()
            sender.sendall(MESSAGE)
            received = 0
            while received < len(MESSAGE):
                received += len(sender.recv(65536))
            samples.append((time.perf_counter() - start) * 1e6)
            time.sleep(gap_s)
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


def main() -> None:
    """Print the three costs (µs of CPU each) and the round trip's latency as one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=2000)
    args = parser.parse_args()
    sleep_us = _sleeps(args.writes)
    spaced = _writes(args.writes, 0.001)
    burst = _writes(args.writes * 10, 0.0)
    rtt_p50, rtt_p99 = _round_trips(args.writes, 0.001)
    print(
        json.dumps(
            {
                "sleep_1ms_us": round(sleep_us, 1),
                "write_to_sleeping_reader_us": round(spaced - sleep_us, 1),
                "write_burst_us": round(burst, 2),
                "round_trip_p50_us": round(rtt_p50, 1),
                "round_trip_p99_us": round(rtt_p99, 1),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
