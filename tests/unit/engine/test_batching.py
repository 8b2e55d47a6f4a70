"""Batching invariants of the simulated engine (vLLM-style continuous batching)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from shared.engine import EngineConfig, EngineRequest, create_engine
from shared.engine.batching import ContinuousBatcher, Sequence


def _drain(batcher: ContinuousBatcher, limit: int = 100_000) -> tuple[Counter[str], int, int]:
    emitted: Counter[str] = Counter()
    preemptions = 0
    steps = 0
    while batcher.num_running or batcher.num_waiting:
        step = batcher.schedule()
        assert step is not None
        assert batcher.used_blocks <= batcher.total_blocks
        assert step.prefill_tokens + step.decode_seqs <= 64
        emitted.update(step.emitted)
        preemptions += len(step.preempted)
        steps += 1
        assert steps < limit
    return emitted, preemptions, steps


def test_tight_kv_cache_preempts_yet_every_request_gets_each_token_once() -> None:
    """Test that under KV pressure requests are preempted, recover, and emit each token once."""
    rng = random.Random(7)
    batcher = ContinuousBatcher(
        total_blocks=40, block_size=4, max_num_seqs=16, max_num_batched_tokens=64
    )
    wanted = {}
    for i in range(60):
        prompt, output = rng.randint(1, 70), rng.randint(1, 60)
        wanted[f"r{i}"] = output
        batcher.add(Sequence(f"r{i}", prompt, output, 0.0))
    emitted, preemptions, _ = _drain(batcher)
    assert preemptions > 0
    assert dict(emitted) == wanted
    assert batcher.used_blocks == 0


def test_max_num_seqs_bounds_the_running_set() -> None:
    """Test that no iteration runs more sequences than max_num_seqs."""
    batcher = ContinuousBatcher(
        total_blocks=10_000, block_size=16, max_num_seqs=8, max_num_batched_tokens=64
    )
    for i in range(30):
        batcher.add(Sequence(str(i), 5, 20, 0.0))
    while batcher.num_running or batcher.num_waiting:
        step = batcher.schedule()
        assert step is not None
        assert batcher.num_running <= 8
        assert step.decode_seqs <= 8


def test_long_prompt_is_prefilled_in_chunks_within_the_token_budget() -> None:
    """Test that chunked prefill splits a prompt over iterations and emits only at its end."""
    batcher = ContinuousBatcher(
        total_blocks=1000, block_size=16, max_num_seqs=4, max_num_batched_tokens=100
    )
    batcher.add(Sequence("long", 250, 2, 0.0))
    steps = [batcher.schedule() for _ in range(4)]
    assert [s.prefill_tokens for s in steps if s] == [100, 100, 50, 0]
    assert [s.emitted for s in steps if s] == [(), (), ("long",), ("long",)]
    assert steps[3] is not None
    assert steps[3].finished == ("long",)


def test_add_rejects_a_request_that_can_never_fit() -> None:
    """Test that add raises ValueError when prompt plus output exceeds the whole KV cache."""
    engine = create_engine(EngineConfig(gpu="A100-80GB", model="llama-2-7b"))
    too_long = engine.kv_blocks_total * engine.config.block_size + 1
    with pytest.raises(ValueError, match="KV tokens"):
        engine.add(EngineRequest(request_id="x", prompt_tokens=too_long, output_tokens=1))


def test_engine_energy_counter_is_sum_of_iteration_energy_plus_idle() -> None:
    """Test that the cumulative energy equals the iterations' energy plus idle energy."""
    engine = create_engine(EngineConfig(gpu="H100-80GB", model="llama-3-8b"))
    for i in range(20):
        engine.add(EngineRequest(request_id=str(i), prompt_tokens=300, output_tokens=40))
    total = 0.0
    while (result := engine.step()) is not None:
        total += result.energy_j
        assert result.power_w > engine.idle_power_w
    idle = engine.idle_until(engine.now_s + 10.0)
    assert idle == pytest.approx(10.0 * engine.idle_power_w)
    assert engine.energy_j == pytest.approx(total + idle)
    assert not engine.has_work


def test_abort_frees_kv_blocks() -> None:
    """Test that aborting a running request returns its KV blocks to the pool."""
    engine = create_engine(EngineConfig(model="llama-3-8b"))
    engine.add(EngineRequest(request_id="a", prompt_tokens=1000, output_tokens=100))
    engine.step()
    assert engine.kv_blocks_used > 0
    assert engine.abort("a")
    assert engine.kv_blocks_used == 0
    assert not engine.abort("a")
