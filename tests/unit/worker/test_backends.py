"""Unit tests of the sim and instant backends, and of the stream book they feed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from services.worker.backend import BackendRefusalError, WorkerBackend
from services.worker.instant_backend import InstantBackend
from services.worker.sim_backend import SimBackend
from services.worker.streams import StreamBook
from shared.engine import EngineConfig, create_engine
from tests.unit.worker.helpers import RecordingSink, classified


@contextlib.asynccontextmanager
async def running(backend: WorkerBackend, sink: RecordingSink) -> AsyncIterator[None]:
    """Start ``backend`` into ``sink`` and run it for the block."""
    await backend.start(sink)
    task = asyncio.create_task(backend.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await backend.close()


def _sim(speedup: float = 1000.0) -> SimBackend:
    return SimBackend(create_engine(EngineConfig(max_num_seqs=8)), speedup)


async def test_the_sim_backend_produces_every_token_once_with_energy() -> None:
    """Test that each request gets exactly max_tokens tokens, ends once and carries energy."""
    backend = _sim()
    sink = RecordingSink(expected=3)
    async with running(backend, sink):
        for i, out in enumerate((1, 4, 9)):
            backend.submit(classified(f"r{i}", prompt_tokens=30, max_tokens=out))
        await asyncio.wait_for(sink.ended.wait(), 5.0)
    assert [sink.tokens(f"r{i}") for i in range(3)] == [1, 4, 9]
    assert sorted(sink.finished()) == ["r0", "r1", "r2"]
    assert sink.energy_j() > 0
    snap = backend.snapshot()
    assert (snap.running, snap.waiting, snap.kv_blocks_used) == (0, 0, 0)
    assert snap.energy_j >= sink.energy_j()
    assert snap.power_w > 0


async def test_the_sim_backend_paces_iterations_to_model_time() -> None:
    """Test that at speed-up 1 a request takes at least its model duration in wall time."""
    backend = _sim(speedup=1.0)
    sink = RecordingSink()
    async with running(backend, sink):
        start = asyncio.get_running_loop().time()
        backend.submit(classified("a", prompt_tokens=100, max_tokens=20))
        submitted_at = backend.engine.now_s
        await asyncio.wait_for(sink.ended.wait(), 5.0)
        wall = asyncio.get_running_loop().time() - start
    model_s = backend.engine.now_s - submitted_at
    assert model_s > 0.05
    assert wall >= 0.95 * model_s
    assert sink.batches[-1].at >= sink.batches[0].at


async def test_a_prompt_beyond_the_kv_cache_is_refused_as_kv_capacity() -> None:
    """Test that the sim backend refuses a request that can never fit, with code kv_capacity."""
    backend = _sim()
    with pytest.raises(BackendRefusalError) as info:
        backend.submit(classified("huge", prompt_tokens=10_000_000, max_tokens=1))
    assert info.value.code == "kv_capacity"


async def test_the_sim_backend_snaps_clock_commands() -> None:
    """Test that a clock is applied snapped to a supported step of the GPU."""
    backend = _sim()
    outcome = await backend.set_clock(1001.0)
    assert outcome.accepted
    assert outcome.applied_mhz in backend.engine.supported_clocks_mhz
    assert backend.snapshot().clock_mhz == outcome.applied_mhz


async def test_the_instant_backend_finishes_what_is_pending_in_one_batch_without_energy() -> None:
    """Test that requests submitted together end in one batch, each with all its tokens."""
    backend = InstantBackend(gpu="A100-80GB", model="llama-3-8b", tp=1)
    sink = RecordingSink(expected=2)
    async with running(backend, sink):
        backend.submit(classified("a", max_tokens=7))
        backend.submit(classified("b", max_tokens=3))
        backend.submit(classified("gone", max_tokens=3))
        backend.abort("gone")
        await asyncio.wait_for(sink.ended.wait(), 5.0)
    assert [b.finished for b in sink.batches] == [("a", "b")]
    assert (sink.tokens("a"), sink.tokens("b"), sink.tokens("gone")) == (7, 3, 0)
    assert sink.energy_j() == 0.0
    assert (await backend.set_clock(990.0)).applied_mhz == backend.snapshot().clock_mhz == 990.0


def test_a_batch_of_several_tokens_of_one_request_goes_out_as_one_chunk() -> None:
    """Test that repeated ids in one batch become one chunk, then a completion with them all."""
    book = StreamBook("w", flush_s=0.05)
    book.open(classified("a", max_tokens=4), accepted_at=0.0)
    chunks, completions = book.on_iteration(
        ("a",) * 4, ("a",), (), 8.0, at=1.0, finish_reasons={"a": "stop"}
    )
    assert [(c.first_index, len(c.token_times)) for _, c in chunks] == [(0, 4)]
    assert [(c.output_tokens, c.energy_j, c.finish_reason) for _, c in completions] == [
        (4, 8.0, "stop")
    ]
