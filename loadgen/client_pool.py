"""Replay one load from several client processes, as a fleet of real clients would send it.

One Python client publishing 2,000 req/s spends about half a core in its own event loop
(publishes, acks, completions), so a completion can wait there before the client stamps it:
that wait is the client's, not the control plane's. :class:`ClientPool` splits the requests
among ``clients`` processes at random (a random split of a Poisson stream is Poisson in
every part), starts them together and gathers what each saw. Each process runs
:func:`loadgen.replay.replay_parts` over the parts (cells) it was given, as a single
client does.

Use: ``pool = ClientPool(...)``; ``pool.start()`` (spawns, waits until every process is
connected); ``pool.go()`` (all start publishing); ``pool.collect()`` (records and the
clients' CPU seconds). ``greenserve bench control-plane --clients N`` drives it.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from loadgen.replay import ClientRecord, replay_parts
from loadgen.traces import TraceRequest
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.gc_pauses import collector_paused
from shared.lifecycle import event_loop_factory

__all__ = ["ClientPool", "split_at_random"]

CLIENT_SEED_BASE = 1_000_003
START_TIMEOUT_S = 60.0
"""How long the processes may take to import, connect and report ready."""


def split_at_random(
    trace: Sequence[TraceRequest], parts: int, seed: int
) -> list[list[TraceRequest]]:
    """Each request to one of ``parts`` drawn uniformly at random, arrival order kept."""
    draw = np.random.default_rng(seed).integers(0, parts, len(trace))
    split: list[list[TraceRequest]] = [[] for _ in range(parts)]
    for request, part in zip(trace, draw, strict=True):
        split[part].append(request)
    return split


@dataclass(frozen=True, slots=True)
class _Job:
    nats_url: str
    parts: tuple[tuple[str, tuple[TraceRequest, ...]], ...]
    """(namespace, requests) per cell this client sends to."""
    model: str
    hops: bool
    settle_timeout_s: float


def _client_process(job: _Job, conn: Connection) -> None:
    async def main() -> tuple[list[ClientRecord], float]:
        nc = await connect_nats(NatsSettings(url=job.nats_url), "client-pool")
        try:
            # No collection in the timed window; the one before it precedes "ready".
            with collector_paused():
                conn.send("ready")
                start_at: float = await asyncio.to_thread(conn.recv)
                await asyncio.sleep(max(0.0, start_at - time.time()))
                cpu0 = time.process_time()
                records = await replay_parts(
                    nc,
                    job.parts,
                    model=job.model,
                    settle_timeout_s=job.settle_timeout_s,
                    hops=job.hops,
                )
                cpu = time.process_time() - cpu0
        finally:
            await nc.close()
        return records, cpu

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        conn.send(runner.run(main()))
    conn.close()


class ClientPool:
    """``clients`` processes that replay their random share of every cell's requests."""

    def __init__(
        self,
        nats_url: str,
        cells: Sequence[tuple[str, Sequence[TraceRequest]]],
        clients: int,
        *,
        seed: int,
        model: str,
        hops: bool = False,
        settle_timeout_s: float = 10.0,
    ) -> None:
        """Split every cell's requests among ``clients`` (``cells``: namespace, requests)."""
        if clients < 1:
            raise ValueError("a client pool needs at least one client")
        # Seeds apart from the cell split's (``seed`` itself), so the two draws are independent.
        shares = [
            split_at_random(requests, clients, CLIENT_SEED_BASE + seed * len(cells) + i)
            for i, (_, requests) in enumerate(cells)
        ]
        self._jobs = [
            _Job(
                nats_url=nats_url,
                parts=tuple(
                    (namespace, tuple(shares[i][c])) for i, (namespace, _) in enumerate(cells)
                ),
                model=model,
                hops=hops,
                settle_timeout_s=settle_timeout_s,
            )
            for c in range(clients)
        ]
        self._context = mp.get_context("spawn")
        self._procs: list[mp.process.BaseProcess] = []
        self._conns: list[Connection] = []

    def start(self) -> None:
        """Spawn the clients and wait until each is connected and waiting for :meth:`go`.

        Raises:
            RuntimeError: a client exited or did not report ready in time.
        """
        for job in self._jobs:
            mine, theirs = self._context.Pipe()
            proc = self._context.Process(target=_client_process, args=(job, theirs), daemon=True)
            proc.start()
            theirs.close()
            self._procs.append(proc)
            self._conns.append(mine)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            replies = [self._receive(i, deadline) for i in range(len(self._conns))]
        except BaseException:
            self.close()
            raise
        if any(reply != "ready" for reply in replies):
            self.close()
            raise RuntimeError("a load-generator process sent no ready signal")

    def go(self, lead_s: float = 0.05) -> float:
        """Tell every client to start publishing at one wall time (returned)."""
        start_at = time.time() + lead_s
        for conn in self._conns:
            conn.send(start_at)
        return start_at

    def collect(self, timeout_s: float) -> tuple[list[ClientRecord], float]:
        """Every client's records and their CPU seconds (blocks until all answered).

        Raises:
            RuntimeError: a client exited or did not answer within ``timeout_s``.
        """
        records: list[ClientRecord] = []
        cpu = 0.0
        deadline = time.monotonic() + timeout_s
        try:
            for i in range(len(self._conns)):
                mine, seconds = self._receive(i, deadline)
                records += mine
                cpu += seconds
        finally:
            self.close()
        return records, cpu

    def _receive(self, i: int, deadline: float) -> Any:
        """Client ``i``'s next message, by the monotonic ``deadline``.

        Raises:
            RuntimeError: the client exited (its traceback is on stderr) or was late.
        """
        conn = self._conns[i]
        if not conn.poll(max(0.0, deadline - time.monotonic())):
            raise RuntimeError(f"load-generator process {i} did not answer in time")
        try:
            return conn.recv()
        except EOFError:
            self._procs[i].join(timeout=5.0)
            raise RuntimeError(
                f"load-generator process {i} exited with code {self._procs[i].exitcode} "
                "(its traceback is above)"
            ) from None

    def close(self) -> None:
        """Stop whatever is still running."""
        for proc in self._procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.kill()
        for conn in self._conns:
            conn.close()
